package orchestrate

import (
	"context"
	"log/slog"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/manifest"
	"github.com/cryo-gpu/cryo/internal/manifest/digest"
)

// images is a checkpoint's image directory as its steps write it: the
// watcher that hashes the pages while the dump writes them, then the
// digests of every file, stamped for a restore on this host.
type images struct {
	dir  string
	id   string        // the target, for the log
	cfg  config.Config // the digest mode (HashAfterDump) and the stamp's records
	hash func(dir string, p digest.Progress) (map[string]string, error)
	log  *slog.Logger
	// watch hashes the page images while the dump writes them; nil
	// before the dump, and once stopped or finished.
	watch *digest.Watcher
}

// watchDump starts the watcher for the dump, so that most of the pages
// are hashed by the time it ends (cores CRIU does not use), unless the
// configuration hashes after the dump.
func (im *images) watchDump() {
	if !im.cfg.HashAfterDump {
		im.watch = digest.Watch(im.dir)
	}
}

// stop is what a failed checkpoint does before any undo: stop the
// digest watcher, and narrow the images' modes, since a partial dump holds
// process memory as much as a whole one.
func (im *images) stop() {
	if im.watch != nil {
		im.watch.Stop()
		im.watch = nil
	}
	_ = manifest.MakePrivate(im.dir)
}

// digests narrows the images' modes and returns the digests of every
// file: the watcher's, finished, or taken now.
func (im *images) digests(ctx context.Context) (map[string]string, error) {
	// Before the digests and the stamp: chmod changes ctime, which the
	// stamp records.
	if err := manifest.MakePrivate(im.dir); err != nil {
		return nil, err
	}
	w := im.watch
	im.watch = nil
	var d map[string]string
	var err error
	if w != nil {
		d, err = w.FinishWith(taskFrom(ctx))
	} else {
		d, err = im.hash(im.dir, taskFrom(ctx))
	}
	if err != nil {
		return nil, err
	}
	// A restore on this host can then trust these digests without reading
	// the image again, as long as no file has changed (see digest.Stamp).
	if err := digest.RecordsFrom(im.cfg).Stamp(im.dir, d); err != nil {
		im.log.Debug("no verification stamp: the restore will hash the image", "id", im.id, "error", err)
	}
	return d, nil
}
