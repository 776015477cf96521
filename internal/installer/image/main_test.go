package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The chart runs its programs from this image: every /usr/local/bin path
// that a template of deploy/helm/cryo execs is a file or link the image
// ships, cryo-k8s's included, and cryo-k8s only when it is given.
func TestImageShipsWhatTheChartRuns(t *testing.T) {
	self, err := os.Executable() // a real ELF for ldd to read
	if err != nil {
		t.Fatal(err)
	}
	full, err := contents(self, self, "")
	if err != nil {
		t.Fatal(err)
	}
	templates, err := filepath.Glob("../../../deploy/helm/cryo/templates/*.yaml")
	if err != nil || len(templates) == 0 {
		t.Fatalf("no chart templates (%v)", err)
	}
	runs := regexp.MustCompile(`(?m)^\s*-\s*/(usr/local/bin/[\w.-]+)\s*$`)
	seen := 0
	for _, tpl := range templates {
		data, err := os.ReadFile(tpl)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range runs.FindAllSubmatch(data, -1) {
			seen++
			if _, ok := full[string(m[1])]; !ok {
				t.Errorf("%s runs /%s, which the image does not ship", filepath.Base(tpl), m[1])
			}
		}
	}
	if seen < 2 {
		t.Errorf("found %d commands in the chart, want the controller's and the agent's at least", seen)
	}
	if full["usr/local/bin/kubectl-cryo"].link != "cryo-k8s" {
		t.Errorf("kubectl-cryo is %+v, want a link to cryo-k8s", full["usr/local/bin/kubectl-cryo"])
	}
	node, err := contents(self, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := node["usr/local/bin/cryo-k8s"]; ok {
		t.Error("an image built without -k8s ships cryo-k8s")
	}
}
