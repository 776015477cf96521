package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"
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
