package shim

import (
	"context"
	"fmt"
	"reflect"

	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/ttrpc"
)

// Service names of the task API. containerd 1.7 only speaks v2; containerd
// 2.x speaks v2 to a shim whose `start` printed a plain address. The v2 and
// v3 shim.proto are identical apart from the package name, so the same
// handlers, with v3 messages, serve both names.
const (
	taskServiceV2 = "containerd.task.v2.Task"
	taskServiceV3 = "containerd.task.v3.Task"
)

// registerTaskAPI registers svc under both task API names.
func registerTaskAPI(server *ttrpc.Server, svc taskv3.TTRPCTaskService) error {
	taskv3.RegisterTTRPCTaskService(server, svc)
	desc, err := serviceDesc(svc)
	if err != nil {
		return err
	}
	server.RegisterService(taskServiceV2, desc)
	return nil
}

// serviceDesc builds a ttrpc service description from the methods of the
// TTRPCTaskService interface: each takes (context, *Request) and returns
// (response, error). Reflection keeps the list of methods in one place,
// containerd's generated interface.
func serviceDesc(svc taskv3.TTRPCTaskService) (*ttrpc.ServiceDesc, error) {
	iface := reflect.TypeOf((*taskv3.TTRPCTaskService)(nil)).Elem()
	value := reflect.ValueOf(svc)
	desc := &ttrpc.ServiceDesc{Methods: map[string]ttrpc.Method{}}
	for i := 0; i < iface.NumMethod(); i++ {
		m := iface.Method(i)
		if m.Type.NumIn() != 2 || m.Type.In(1).Kind() != reflect.Pointer {
			return nil, fmt.Errorf("task API method %s has an unexpected signature", m.Name)
		}
		desc.Methods[m.Name] = method(value.MethodByName(m.Name), m.Type.In(1).Elem())
	}
	return desc, nil
}

func method(fn reflect.Value, req reflect.Type) ttrpc.Method {
	return func(ctx context.Context, unmarshal func(interface{}) error) (interface{}, error) {
		r := reflect.New(req)
		if err := unmarshal(r.Interface()); err != nil {
			return nil, err
		}
		out := fn.Call([]reflect.Value{reflect.ValueOf(ctx), r})
		err, _ := out[1].Interface().(error)
		return out[0].Interface(), err
	}
}
