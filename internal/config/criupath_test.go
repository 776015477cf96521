package config

import (
	"reflect"
	"testing"
)

func TestCRIUFirst(t *testing.T) {
	env := []string{"A=1", "PATH=/usr/sbin:/usr/bin", "B=2"}
	for _, c := range []struct {
		criu string
		want []string
	}{
		{"/opt/cryo/sbin/criu", []string{"A=1", "B=2", "PATH=/opt/cryo/sbin:/usr/sbin:/usr/bin"}},
		{"/usr/sbin/criu", env},             // already first
		{"", env},                           // not configured
		{"criu", env},                       // relative: PATH decides anyway
		{"/opt/criu-4.2/bin/criu-4.2", env}, // runc looks up `criu` by name
	} {
		if got := CRIUFirst(env, c.criu); !reflect.DeepEqual(got, c.want) {
			t.Errorf("CRIUFirst(%q) = %q, want %q", c.criu, got, c.want)
		}
	}
	if got := CRIUFirst([]string{"A=1"}, "/opt/c/criu"); !reflect.DeepEqual(got, []string{"A=1", "PATH=/opt/c:" + DefaultPath}) {
		t.Errorf("no PATH: %q", got)
	}
}
