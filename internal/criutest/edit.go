// Package criutest edits CRIU images as an attacker with go-criu would, for
// the tests that prove a restore refuses what an edited image claims.
package criutest

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/checkpoint-restore/go-criu/v7/crit"
	"google.golang.org/protobuf/proto"
)

// EditImage rewrites every entry of the CRIU image name in dir through fn
// (msg is the entry type) and writes it back with the image's own magic.
func EditImage(t testing.TB, dir, name string, msg proto.Message, fn func(proto.Message)) {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := crit.New(f, nil, "", false, true).Decode(msg)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := append([]byte{}, raw[:8]...) // the magic numbers
	for _, e := range img.Entries {
		fn(e.Message)
		b, err := proto.Marshal(e.Message)
		if err != nil {
			t.Fatal(err)
		}
		out = append(binary.LittleEndian.AppendUint32(out, uint32(len(b))), b...)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// AppendEntry adds msg as one more entry at the end of the CRIU image name
// in dir, as an attacker adding a mount, a thread or a file would.
func AppendEntry(t testing.TB, dir, name string, msg proto.Message) {
	t.Helper()
	path := filepath.Join(dir, name)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	raw = append(binary.LittleEndian.AppendUint32(raw, uint32(len(b))), b...)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}
