package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/cryo-gpu/cryo/internal/config"
	"github.com/cryo-gpu/cryo/internal/criuaction"
)

// chosenAs returns the names of the personalities chosen under argv0 with
// the given environment variables set.
func chosenAs(t *testing.T, argv0 string, env map[string]string) []string {
	t.Helper()
	args := os.Args
	t.Cleanup(func() { os.Args = args })
	os.Args = []string{argv0}
	t.Setenv(config.EnvHelper, "")
	for k, v := range env {
		t.Setenv(k, v)
	}
	var names []string
	for _, p := range personalities {
		if p.chosen() {
			names = append(names, p.name)
		}
	}
	return names
}

// installedNames reads the Makefile's LINKS, the names that make build and
// the release bundle link to cryo.
func installedNames(t *testing.T) []string {
	t.Helper()
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^LINKS\s*:=\s*(.+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no LINKS in the Makefile")
	}
	return strings.Fields(string(m[1]))
}

// Every name cryo is installed under chooses exactly one personality, and
// so does the watcher's re-execution; cryo itself chooses none (the CLI).
func TestEveryNameChoosesOnePersonality(t *testing.T) {
	names := append(installedNames(t), criuaction.WatcherName)
	for _, name := range names {
		for _, argv0 := range []string{name, "/usr/local/bin/" + name} {
			if got := chosenAs(t, argv0, nil); len(got) != 1 {
				t.Errorf("argv[0] %s chooses %v, want one personality", argv0, got)
			}
		}
	}
	for _, argv0 := range []string{"cryo", "/usr/local/bin/cryo", "cryo-cuda-helper"} {
		if got := chosenAs(t, argv0, nil); len(got) != 0 {
			t.Errorf("argv[0] %s chooses %v, want the CLI", argv0, got)
		}
	}
}

// The driver helper is chosen by its environment variable, first, under
// whatever name it runs.
func TestDriverHelperComesFirst(t *testing.T) {
	for _, argv0 := range append(installedNames(t), "cryo", "cryo-cuda-helper") {
		got := chosenAs(t, argv0, map[string]string{config.EnvHelper: "1"})
		if len(got) == 0 || got[0] != "driver helper" {
			t.Errorf("argv[0] %s with %s=1 chooses %v, want the driver helper first", argv0, config.EnvHelper, got)
		}
	}
	if !personalities[0].duringInit {
		t.Error("the driver helper is not chosen during init")
	}
}

// `cryo node …` is the node installer, and only under the first argument
// "node": the CLI keeps every other first argument.
func TestNodeInstallerByFirstArgument(t *testing.T) {
	args := os.Args
	t.Cleanup(func() { os.Args = args })
	t.Setenv(config.EnvHelper, "")
	for _, c := range []struct {
		argv []string
		want int
	}{
		{[]string{"cryo", "node", "install"}, 1},
		{[]string{"/usr/local/bin/cryo", "node", "uninstall"}, 1},
		{[]string{"cryo", "checkpoint", "node"}, 0},
		{[]string{"cryo"}, 0},
	} {
		os.Args = c.argv
		var names []string
		for _, p := range personalities {
			if p.chosen() {
				names = append(names, p.name)
			}
		}
		if len(names) != c.want || (c.want == 1 && names[0] != "node installer") {
			t.Errorf("%v chooses %v, want %d (the node installer)", c.argv, names, c.want)
		}
	}
}
