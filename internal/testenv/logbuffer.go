package testenv

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// LogBuffer collects log lines that concurrent goroutines write, for tests that read a
// component's logs.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// PlantedSource is a CloudEvent source with a password in its userinfo, which no log line may
// show.
const PlantedSource = "https://robot:planted-password@registry.example/"

// CheckLogged checks the log of a function process as reflector's commands write theirs: the
// line msg about the event id is JSON, names the source PlantedSource with its userinfo masked,
// and carries the trace id traceID; and no line shows the planted password.
func CheckLogged(tb testing.TB, output, msg, id, traceID string) {
	tb.Helper()
	if strings.Contains(output, "planted-password") {
		tb.Errorf("the process logged the password of the event's source:\n%s", output)
	}
	for line := range strings.Lines(output) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != msg || rec["id"] != id {
			continue
		}
		if rec["source"] != "https://xxxxx@registry.example/" || rec["trace_id"] != traceID {
			tb.Errorf("want source https://xxxxx@registry.example/ and trace_id %s: %s", traceID, line)
		}
		return
	}
	tb.Errorf("no JSON line %q about event %s:\n%s", msg, id, output)
}
