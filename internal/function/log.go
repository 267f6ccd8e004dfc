package function

import (
	"io"
	"log/slog"

	"github.com/imagereflector/reflector/internal/redact"
	"github.com/imagereflector/reflector/internal/trace"
)

// Logger returns the logger reflector's processes write through: one JSON object per line to
// w, with URL userinfo and tokens masked in the message and the attributes (redact.Handler) and
// the trace id of the record's context added as trace_id (trace.Handler). The commands build
// theirs here and a Host builds its own here, so a function logs the same lines however it is
// served.
func Logger(w io.Writer) *slog.Logger {
	return slog.New(redact.Handler(trace.Handler(slog.NewJSONHandler(w, nil))))
}
