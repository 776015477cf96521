package main

import "github.com/urfave/cli/v2"

func cudaCommand() *cli.Command   { return &cli.Command{Name: "cuda", Usage: "not yet"} }
func doctorCommand() *cli.Command { return &cli.Command{Name: "doctor", Usage: "not yet"} }
