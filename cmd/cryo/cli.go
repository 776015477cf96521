package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/cryo-gpu/cryo/config"
)

// runCLI runs the user CLI and returns the exit code.
// cfg is the CLI's configuration, read once from the environment when it
// starts; flags override single settings.
var cfg config.Config

func runCLI(args []string) int {
	cfg = config.FromEnv()
	app := &cli.App{
		Name:  "cryo",
		Usage: "checkpoint and restore processes and containers that use NVIDIA GPUs",
		Description: `cryo suspends CUDA in a process (the GPU memory moves into host memory),
checkpoints it with CRIU, and restores it later, here or on another host with
the same GPU model, without the application noticing.

For containers, use cryo through the tools you already have: containerd
(runtime io.containerd.cryo.v2), Podman (--runtime cryo-runc) or Kubernetes
(RuntimeClass "cryo"). See docs/ for each.`,
		Commands: []*cli.Command{
			checkpointCommand(),
			restoreCommand(),
			cudaCommand(),
			doctorCommand(),
			imageCommand(),
			inspectCommand(),
		},
		HideHelpCommand: true,
	}
	if err := app.Run(args); err != nil {
		fmt.Fprintln(os.Stderr, "cryo:", err)
		return 1
	}
	return 0
}
