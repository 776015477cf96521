// Command cryo-k8s holds cryo's Kubernetes front ends, kept apart from the
// node binary cryo so that cryo links no Kubernetes client. client-go,
// apimachinery's schemes and controller-runtime double cryo's size and add
// to the init of every exec of it, and cryo is exec'd many times on the
// checkpoint and restore path (the shim, each CRIU action, each driver
// call). The cluster's programs run from the chart's image or an
// administrator's PATH, never on that path, so they live here. The table
// below lists them, with who starts each and how it is chosen.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/cryo-gpu/cryo/internal/k8s/agent"
	"github.com/cryo-gpu/cryo/internal/k8s/controller"
	"github.com/cryo-gpu/cryo/internal/k8s/kubectlcryo"
)

// A personality is one of the programs this binary is.
type personality struct {
	name   string      // what it is, for the reader and the usage
	chosen func() bool // whether this process is it
	run    func() int  // runs it; the process's exit code
}

// personalities are tried in this order; the first chosen runs.
var personalities = []personality{
	// Started by kubectl as the plugin kubectl-cryo (`kubectl cryo …`),
	// found in PATH by that name, a link to this binary. Chosen by
	// argv[0]: kubectl passes the user's arguments alone, which may be
	// anything, "agent" included.
	{name: "kubectl plugin", chosen: calledAs(kubectlcryo.BinaryName), run: runKubectlPlugin},
	// Started by the Helm chart's agent DaemonSet on each cryo-ready node:
	// `cryo-k8s agent`, the Kubernetes node agent (internal/k8s/agent).
	{name: "agent", chosen: firstArg("agent"), run: runAgent},
	// Started by the Helm chart's controller Deployment (deploy/helm/cryo):
	// `cryo-k8s controller`, the Checkpoint controller and the admission
	// webhooks in one process (internal/k8s/controller).
	{name: "controller", chosen: firstArg("controller"), run: runController},
}

func main() {
	for _, p := range personalities {
		if p.chosen() {
			os.Exit(p.run())
		}
	}
	os.Exit(usage())
}

// usage names the commands, for a process that is none of them: exit 2,
// as for a bad flag.
func usage() int {
	fmt.Fprintln(os.Stderr, "usage: cryo-k8s agent|controller [flags] (or run as kubectl-cryo, `kubectl cryo`)")
	return 2
}

// calledAs chooses a personality by the base name of argv[0], which the
// installed link (make build, the release) sets.
func calledAs(name string) func() bool {
	return func() bool { return filepath.Base(os.Args[0]) == name }
}

// firstArg chooses a personality by the first argument, unless argv[0]
// is the plugin's, whose arguments are the user's.
func firstArg(word string) func() bool {
	plugin := calledAs(kubectlcryo.BinaryName)
	return func() bool { return !plugin() && len(os.Args) > 1 && os.Args[1] == word }
}

// runAgent runs `cryo-k8s agent …`.
func runAgent() int { return agent.Main(os.Args[2:]) }

// runController runs `cryo-k8s controller …`.
func runController() int { return controller.Main(os.Args[2:]) }

// runKubectlPlugin runs `kubectl cryo …`.
func runKubectlPlugin() int { return kubectlcryo.Main(os.Args[1:]) }
