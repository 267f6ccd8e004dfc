package store

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// Without an inotify watch the holder still works, and says how it then
// sees waiting processes.
func TestListenWithoutInotify(t *testing.T) {
	var logged bytes.Buffer
	r := listen(filepath.Join(t.TempDir(), "missing", gateFile), func() {}, slog.New(slog.NewTextHandler(&logged, nil)))
	if r.f != nil {
		t.Fatal("listen watched a file that does not exist")
	}
	r.stop()
	if !strings.Contains(logged.String(), "no inotify for the tag store") {
		t.Errorf("logged %q, want a warning", logged.String())
	}
}
