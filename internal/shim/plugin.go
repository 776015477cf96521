package shim

import (
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2/task"
	"github.com/containerd/containerd/v2/pkg/shim"
	"github.com/containerd/containerd/v2/pkg/shutdown"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/plugin"
	"github.com/containerd/plugin/registry"
)

// registerTaskPlugin registers the shim's task service: containerd's runc
// task service, wrapped. It is registered from Main, not from init, so that
// the other names of the multi-call binary carry no shim plugin.
func registerTaskPlugin() {
	registry.Register(&plugin.Registration{
		Type:     plugins.TTRPCPlugin,
		ID:       "task",
		Requires: []plugin.Type{plugins.EventPlugin, plugins.InternalPlugin},
		InitFn:   initTaskService,
	})
}

func initTaskService(ic *plugin.InitContext) (interface{}, error) {
	pp, err := ic.GetByID(plugins.EventPlugin, "publisher")
	if err != nil {
		return nil, err
	}
	sd, err := ic.GetByID(plugins.InternalPlugin, "shutdown")
	if err != nil {
		return nil, err
	}
	publisher := pp.(shim.Publisher)
	// The runc service's shutdown waits for cryo's runs (stopping.go).
	draining := &drainingShutdown{Service: sd.(shutdown.Service)}
	inner, err := task.NewTaskService(ic.Context, publisher, draining)
	if err != nil {
		return nil, err
	}
	s := newService(inner, publisher, ic.Properties[plugins.PropertyGRPCAddress])
	draining.drain = func() { s.drain(ic.Context) }
	s.watchSignals(ic.Context)
	return s, nil
}
