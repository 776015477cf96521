package main

// TEMPORARY stub: the runtime owner replaces this file with the bare-process
// `cryo checkpoint --pid` / `cryo restore --dir` commands.

import "github.com/urfave/cli/v2"

func checkpointCommand() *cli.Command { return &cli.Command{Name: "checkpoint", Usage: "not yet"} }
func restoreCommand() *cli.Command    { return &cli.Command{Name: "restore", Usage: "not yet"} }
