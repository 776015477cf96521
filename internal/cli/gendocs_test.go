package cli

import (
	"bytes"
	"os"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
)

// TestCLIReferenceCurrent: docs/cli.md is what the command tree generates,
// so the reference cannot drift from the flags the commands really take.
func TestCLIReferenceCurrent(t *testing.T) {
	var b bytes.Buffer
	WriteMarkdown(&b, newApp(config.Config{}).newRoot())
	have, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, b.Bytes()) {
		t.Fatal("docs/cli.md is stale: run `make docs` and commit it")
	}
}
