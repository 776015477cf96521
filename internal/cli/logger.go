package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/cryo-gpu/cryo/internal/orchestrate"
)

// termHandler writes the orchestration's warnings as cryo's other messages
// are written ("cryo: warning: …"), not as slog's key=value records, which
// are for the shim's and cryo-runc's logs. A failed step is dropped: the
// command reports its error itself, once.
type termHandler struct {
	mu    *sync.Mutex
	w     io.Writer
	attrs []slog.Attr
}

func (h *termHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *termHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == orchestrate.MsgStepFailed {
		return nil
	}
	var details []string
	add := func(a slog.Attr) bool {
		if a.Key != "id" { // the target is the command's own argument
			details = append(details, fmt.Sprintf("%s %v", a.Key, a.Value.Any()))
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	line := "cryo: warning: " + r.Message
	if len(details) > 0 {
		line += " (" + strings.Join(details, ", ") + ")"
	}
	if h.mu != nil {
		h.mu.Lock()
		defer h.mu.Unlock()
	}
	_, err := fmt.Fprintln(h.w, line)
	return err
}

func (h *termHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr{}, h.attrs...), as...)
	return &c
}

// WithGroup is flat: the orchestration logs no groups.
func (h *termHandler) WithGroup(string) slog.Handler { return h }
