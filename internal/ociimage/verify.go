package ociimage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cryo-gpu/cryo/internal/manifest"
	filedigest "github.com/cryo-gpu/cryo/internal/manifest/digest"
	"github.com/cryo-gpu/cryo/internal/report"
)

// VerifyError is a checkpoint whose files do not match cryo's manifest
// (`cryo inspect --verify`): File is the first bad file (a CRIU image's
// name in its directory, the manifest itself, or a layer's digest), Err
// the cause, which wraps manifest.ErrCorrupt for a damaged file, ErrIntegrity
// for a damaged layer, or manifest.ErrNoManifest when there are no digests
// to check against.
type VerifyError struct {
	Target string
	File   string
	Err    error
}

func (e *VerifyError) Error() string { return fmt.Sprintf("verify %s: %v", e.Target, e.Err) }

// Unwrap gives errors.Is and errors.As the cause.
func (e *VerifyError) Unwrap() error { return e.Err }

// VerifyPath checks every file of a checkpoint directory or export tar
// against the digests in its cryo manifest, hashing them all (no stamp is
// trusted). A tar is extracted in full under tmp (its pages must be read
// to be hashed) and removed after. Files outside the CRIU image directory
// (an export's rootfs diff, config.dump) carry no cryo digest.
func VerifyPath(path, tmp string) error {
	src, err := OpenSource(path, tmp)
	if err != nil {
		return &VerifyError{Target: path, Err: err}
	}
	defer src.Close()
	return verifyDir(path, src.CRIU)
}

// verifyDir checks the CRIU image directory dir against its manifest.
func verifyDir(target, dir string) error {
	m, err := manifest.Read(dir)
	if errors.Is(err, manifest.ErrNoManifest) {
		return &VerifyError{Target: target, File: manifest.ManifestName, Err: report.WithRemedy(fmt.Errorf("it has no cryo manifest, so no digests to check its files against (it was not taken by cryo): %w", err), "none to restore it, but only a checkpoint taken by cryo can be verified")}
	}
	if err != nil {
		return &VerifyError{Target: target, File: manifest.ManifestName, Err: err}
	}
	if err := filedigest.Verify(dir, m.Digests); err != nil {
		return verifyError(target, err)
	}
	return nil
}

// VerifyLocal checks an image of the store: every layer against its digest
// and diff_id, then every CRIU image file against cryo's manifest, by
// unpacking it under tmp (removed after). An encrypted image needs dec.
func (st *Store) VerifyLocal(ctx context.Context, ref, tmp string, dec *DecryptOptions) error {
	work, err := os.MkdirTemp(tmp, "cryo-verify-")
	if err != nil {
		return &VerifyError{Target: ref, Err: fmt.Errorf("make a work directory under %s: %w", tmp, err)}
	}
	defer os.RemoveAll(work)
	// Hash every file: a stamp from an earlier restore would vouch for
	// files this check is meant to read. The stamp it leaves goes with work.
	full := *st
	full.Records = filedigest.Records{Full: true, Dir: filepath.Join(work, "stamps")}
	out := filepath.Join(work, "image")
	if _, err := full.Unpack(ctx, ref, out, dec); err != nil {
		return verifyError(ref, err)
	}
	if _, err := manifest.Read(CRIUDir(out)); errors.Is(err, manifest.ErrNoManifest) {
		return &VerifyError{Target: ref, File: manifest.ManifestName, Err: fmt.Errorf("its layers match their digests, but it has no cryo manifest, so no digests to check its files against (it was not taken by cryo): %w", err)}
	}
	return nil
}

// verifyError names the first bad file of err.
func verifyError(target string, err error) error {
	e := &VerifyError{Target: target, Err: err}
	var cf *filedigest.CorruptFileError
	if errors.As(err, &cf) {
		e.File = cf.File
	}
	var le *LayerError
	if e.File == "" && errors.As(err, &le) {
		e.File = le.Digest
	}
	return e
}
