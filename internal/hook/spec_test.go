package hook

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	good := []struct {
		text string
		want Spec
	}{
		{"http:POST /sleep?level=1 port=8000", Spec{Kind: KindHTTP, Method: "POST", Target: "/sleep?level=1", Port: 8000}},
		{"  http:GET /health   port=1 ", Spec{Kind: KindHTTP, Method: "GET", Target: "/health", Port: 1}},
		{"http:POST /release_memory_occupation port=30000 json={}", Spec{Kind: KindHTTP, Method: "POST", Target: "/release_memory_occupation", Port: 30000, Body: "{}"}},
		{"exec:/bin/kill -USR1 1", Spec{Kind: KindExec, Argv: []string{"/bin/kill", "-USR1", "1"}}},
		{`exec:["/bin/sh","-c","echo 'a b'"]`, Spec{Kind: KindExec, Argv: []string{"/bin/sh", "-c", "echo 'a b'"}}},
	}
	for _, g := range good {
		s, err := Parse(g.text)
		if err != nil {
			t.Errorf("Parse(%q): %v", g.text, err)
			continue
		}
		g.want.Timeout, g.want.Text = DefaultTimeout, g.text
		if !reflect.DeepEqual(s, g.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", g.text, s, g.want)
		}
	}
	bad := map[string]string{
		"":                               "no kind",
		"/sleep":                         "no kind",
		"https:POST /sleep port=1":       `unknown kind "https"`,
		"http:DELETE /sleep port=8000":   `method "DELETE"`,
		"http:post /sleep port=8000":     `method "post"`,
		"http:POST sleep port=8000":      `path "sleep"`,
		"http:POST //evil/x port=8000":   `path "//evil/x"`,
		"http:POST /sleep port=0":        `"port=0"`,
		"http:POST /sleep port=65536":    `"port=65536"`,
		"http:POST /sleep port=08000":    `"port=08000"`,
		"http:POST /sleep 8000":          `"8000"`,
		"http:POST /sleep port=1 extra":  `"extra", want json=BODY`,
		"http:POST /sleep port=1 json={": `"json={", want json=BODY`,
		"http:POST /s port=1 json={} x":  "5 fields",
		"exec:":                          "no command",
		`exec:/bin/sh -c "echo hi"`:      "JSON array",
		"exec:sh -c true":                "not an absolute path",
		`exec:["/bin/sh",1]`:             "not a JSON array of strings",
		`exec:[]`:                        "no command",
	}
	for text, want := range bad {
		_, err := Parse(text)
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want ErrSyntax saying %q", text, err, want)
		}
	}
}

func TestFromAnnotations(t *testing.T) {
	ann := map[string]string{
		AnnPreCheckpoint:                   "http:POST /sleep?level=1 port=8000",
		AnnPreCheckpointTimeout:            "90s",
		AnnPostRestore:                     "http:POST /wake_up port=8000",
		AnnPostRestore + ".sidecar":        "exec:/bin/true",
		"io.kubernetes.cri.container-name": "sidecar",
	}
	h, err := FromAnnotations(ann)
	if err != nil {
		t.Fatal(err)
	}
	if h.Pre == nil || h.Pre.Timeout != 90*time.Second || h.Pre.Target != "/sleep?level=1" {
		t.Errorf("pre = %+v, want the pod-wide sleep with 90s", h.Pre)
	}
	if h.Post == nil || h.Post.Kind != KindExec || h.Post.Timeout != DefaultTimeout {
		t.Errorf("post = %+v, want the container's own exec hook", h.Post)
	}
	for _, bad := range []map[string]string{
		{AnnPreCheckpoint: "http:POST /sleep"},
		{AnnPreCheckpoint: "exec:/bin/true", AnnPreCheckpointTimeout: "-1s"},
		{AnnPostRestoreTimeout: "10s"},
	} {
		if _, err := FromAnnotations(bad); !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "annotation cryo.io/") {
			t.Errorf("FromAnnotations(%v) = %v, want ErrSyntax naming the annotation", bad, err)
		}
	}
	if h, err := FromAnnotations(map[string]string{"other": "x"}); err != nil || h.Pre != nil || h.Post != nil {
		t.Errorf("no hook annotations: %+v, %v", h, err)
	}
}
