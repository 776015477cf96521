package ociimage

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// An encrypted build writes no plain layer into the store, not even for a
// moment: every file created in the blob directory during the build is
// watched (inotify), and none may be a plain layer's temp file.
func TestEncryptedBuildWritesNoPlaintext(t *testing.T) {
	pub, _ := rsaPEM(t)
	ctx := context.Background()
	st := newStore(t)
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Skipf("inotify: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, st.blobDir(), unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		t.Fatal(err)
	}
	src, err := OpenSource(fakeCheckpoint(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, _, err := Build(ctx, st, src, BuildOptions{Ref: "example/ckpt:1", SplitAt: 2 << 20, Encrypt: &EncryptOptions{PublicKeys: [][]byte{pub}}}); err != nil {
		t.Fatal(err)
	}
	created := inotifyNames(t, fd)
	if len(created) == 0 {
		t.Fatal("the watch saw no file created: the test sees nothing")
	}
	for _, name := range created {
		if strings.HasPrefix(name, ".build-") {
			t.Fatalf("a plain layer was written to the store during an encrypted build: %s (all: %v)", name, created)
		}
	}
}

// inotifyNames reads the names of the pending inotify events of fd.
func inotifyNames(t *testing.T, fd int) []string {
	t.Helper()
	var names []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err != nil || n <= 0 {
			return names
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafePointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			names = append(names, string(bytes.TrimRight(nameBytes, "\x00")))
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

func unsafePointer(b *byte) unsafe.Pointer { return unsafe.Pointer(b) }
