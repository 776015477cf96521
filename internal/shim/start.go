package shim

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/shim"
)

// invocation is what containerd passes on the command line. containerd 1.7
// adds -publish-binary, 2.x may add -socket/-bundle; both are accepted.
type invocation struct {
	namespace string
	id        string
	address   string
	debug     bool
	version   bool // -v: print cryo's version, not only the shim library's
	action    string
}

// parseInvocation reads the flags without touching flag.CommandLine, which
// containerd's pkg/shim parses again when it serves. ok is false on flags
// this shim does not know, so that pkg/shim reports them.
func parseInvocation() (invocation, bool) {
	var inv invocation
	fs := flag.NewFlagSet(BinaryName, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&inv.namespace, "namespace", "", "")
	fs.StringVar(&inv.id, "id", "", "")
	fs.StringVar(&inv.address, "address", "", "")
	fs.BoolVar(&inv.debug, "debug", false, "")
	for _, name := range []string{"publish-binary", "socket", "debug-socket", "bundle"} {
		fs.String(name, "", "")
	}
	fs.BoolVar(&inv.version, "v", false, "")
	fs.Bool("info", false, "")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return inv, false
	}
	inv.action = fs.Arg(0)
	return inv, true
}

// startMain implements `containerd-shim-cryo-v2 start`: it starts (or
// finds) the serving shim and prints its address in the plain form that
// containerd 1.7 and 2.x both accept. containerd 1.7 reads stdout and
// stderr together, so nothing else may be printed on success.
func startMain(inv invocation) {
	if inv.namespace == "" {
		fail(fmt.Errorf("%s start: -namespace is required", BinaryName))
	}
	ctx := namespaces.WithNamespace(context.Background(), inv.namespace)
	opts := shim.StartOpts{
		Address:      inv.address,
		TTRPCAddress: os.Getenv("TTRPC_ADDRESS"),
		Debug:        inv.debug,
	}
	params, err := newManager().Start(ctx, inv.id, opts)
	if err != nil {
		fail(err)
	}
	// containerd 1.7 finds a running shim again through ./address after its
	// own restart; 2.x falls back to it when bootstrap.json is absent.
	if err := os.WriteFile("address", []byte(params.Address), 0o644); err != nil {
		fail(fmt.Errorf("write address file: %w", err))
	}
	if _, err := os.Stdout.WriteString(params.Address); err != nil {
		fail(err)
	}
	os.Exit(0)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "%s: %v", BinaryName, err)
	os.Exit(1)
}
