package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cryo-gpu/cryo/config"
	"github.com/cryo-gpu/cryo/runtime"
)

// lockTimeout is --lock-timeout, refused when it is not positive: the
// driver reads zero or less as "its default", which would silently replace
// what the user typed.
func lockTimeout(c *cli.Context) (time.Duration, error) {
	d := c.Duration("lock-timeout")
	if d <= 0 {
		return 0, cli.Exit(fmt.Sprintf("cryo: --lock-timeout must be positive (got %s); remedy: give a duration such as 10s or 1m", d), 2)
	}
	return d, nil
}

// copyTimeoutFlag bounds the driver's GPU memory copies: a hung driver
// holds the workload frozen until then, and its default suits tens of GiB.
var copyTimeoutFlag = &cli.DurationFlag{Name: "copy-timeout", Value: 10 * time.Minute, EnvVars: []string{config.EnvCopyTimeout},
	Usage: "deadline of a driver call that copies GPU memory (suspend, restore); a hung driver is cut off then and the processes rolled back"}

// driverOption is the driver of a command with --copy-timeout, refused when
// it is not positive (the driver would read it as its default).
func driverOption(c *cli.Context) (runtime.Option, error) {
	d := c.Duration("copy-timeout")
	if d <= 0 {
		return nil, cli.Exit(fmt.Sprintf("cryo: --copy-timeout must be positive (got %s); remedy: give a duration such as 90s or 5m", d), 2)
	}
	opts := runtime.DriverOptions(cfg)
	opts.CopyTimeout = d
	return runtime.WithDriverOptions(opts), nil
}
