package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// chosen returns the names of the personalities chosen under argv.
func chosen(t *testing.T, argv ...string) []string {
	t.Helper()
	args := os.Args
	t.Cleanup(func() { os.Args = args })
	os.Args = argv
	var names []string
	for _, p := range personalities {
		if p.chosen() {
			names = append(names, p.name)
		}
	}
	return names
}

// k8sNames reads the Makefile's K8S_LINKS, the names that make build and
// the release link to cryo-k8s.
func k8sNames(t *testing.T) []string {
	t.Helper()
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^K8S_LINKS\s*:=\s*(.+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no K8S_LINKS in the Makefile")
	}
	return strings.Fields(string(m[1]))
}

// Each argv chooses the one personality it names, and argv[0] wins over
// the arguments: `kubectl cryo agent` is the plugin's, not the agent.
func TestPersonalities(t *testing.T) {
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"cryo-k8s", "agent", "--node", "n"}, "agent"},
		{[]string{"/usr/local/bin/cryo-k8s", "controller"}, "controller"},
		{[]string{"kubectl-cryo", "agent"}, "kubectl plugin"},
		{[]string{"/usr/local/bin/kubectl-cryo", "checkpoint", "pod/x"}, "kubectl plugin"},
		{[]string{"cryo-k8s", "k8s", "agent"}, ""},
		{[]string{"cryo-k8s"}, ""},
	} {
		got := chosen(t, c.argv...)
		if c.want == "" && len(got) != 0 || c.want != "" && (len(got) != 1 || got[0] != c.want) {
			t.Errorf("%v chooses %v, want %q", c.argv, got, c.want)
		}
	}
}

// Every name cryo-k8s is installed under chooses exactly one personality.
func TestEveryNameChoosesOnePersonality(t *testing.T) {
	for _, name := range k8sNames(t) {
		for _, argv0 := range []string{name, "/usr/local/bin/" + name} {
			if got := chosen(t, argv0); len(got) != 1 {
				t.Errorf("argv[0] %s chooses %v, want one personality", argv0, got)
			}
		}
	}
}
