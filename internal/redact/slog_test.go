package redact

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// secretValue logs as a URL with userinfo, as a slog.LogValuer.
type secretValue struct{}

func (secretValue) LogValue() slog.Value {
	return slog.StringValue("http://u:planted-4@127.0.0.1:1")
}

func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewJSONHandler(&buf, nil)))
	log = log.With("sink", "http://u:planted-1@127.0.0.1:1").WithGroup("g")
	log.Error("dial socks5://u:planted-2@127.0.0.1:1080 failed",
		"error", errors.New(`Get "https://u:planted-3@127.0.0.1:5000/v2/": EOF`),
		"value", secretValue{},
		slog.Group("inner", "address", "u:planted-5@127.0.0.1:3128"),
		"count", 3)
	line := buf.String()
	if strings.Contains(line, "planted") {
		t.Errorf("the log line shows a password: %s", line)
	}
	for _, want := range []string{
		`"sink":"http://xxxxx@127.0.0.1:1"`,
		`"msg":"dial socks5://xxxxx@127.0.0.1:1080 failed"`,
		`"error":"Get \"https://xxxxx@127.0.0.1:5000/v2/\": EOF"`,
		`"value":"http://xxxxx@127.0.0.1:1"`,
		`"inner":{"address":"xxxxx@127.0.0.1:3128"}`,
		`"count":3`,
	} {
		if !strings.Contains(line, want) {
			t.Errorf("the log line lacks %s: %s", want, line)
		}
	}
}

func TestHandlerBoundsAndEscapes(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewJSONHandler(&buf, nil)))
	body := strings.Repeat("registry error body \u202e\x1b[31m ", 3000)
	log.Error("scan "+body, "error", errors.New("GET /v2/: "+body), "detail", body)
	line := buf.String()
	if len(line) > 4*MaxText+200 {
		t.Errorf("a log line with three 48 KiB texts is %d bytes", len(line))
	}
	if strings.Contains(line, "\u202e") || strings.Contains(line, `\u001b`) {
		t.Errorf("the log line holds unescaped control characters: %.300s", line)
	}
	if !strings.Contains(line, `\\u202e\\x1b[31m`) {
		t.Errorf("the log line does not show the escapes: %.300s", line)
	}
}
