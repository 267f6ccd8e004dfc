package trace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

const example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestParse(t *testing.T) {
	c, err := Parse(example)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.TraceIDString(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id %s", got)
	}
	if c.Flags != 1 {
		t.Errorf("flags %x", c.Flags)
	}
	if c.String() != example {
		t.Errorf("String() = %s", c.String())
	}
	// A later version may append fields; its first four are read.
	if c2, err := Parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-will-hold"); err != nil || c2 != c {
		t.Errorf("future version: %v %v", c2, err)
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{
		"",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
		"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
	} {
		if _, err := Parse(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) = %v, want ErrMalformed", s, err)
		}
	}
}

func TestContinue(t *testing.T) {
	in, _ := Parse(example)
	ctx := Continue(context.Background(), example)
	c, ok := From(ctx)
	if !ok || c.TraceID != in.TraceID || c.SpanID == in.SpanID {
		t.Errorf("continued %v from %v: want the same trace id and a new span id", c, in)
	}
	ctx = Continue(context.Background(), "garbage")
	if c, ok := From(ctx); !ok || !c.IsValid() {
		t.Error("a malformed traceparent must start a new trace")
	}
	if _, ok := From(context.Background()); ok {
		t.Error("an empty context carries no trace")
	}
	if got, _ := From(Ensure(ctx)); got != (func() Context { c, _ := From(ctx); return c })() {
		t.Error("Ensure must keep an existing trace")
	}
	moved, _ := From(Copy(context.Background(), ctx))
	if orig, _ := From(ctx); moved != orig {
		t.Error("Copy must carry the trace")
	}
}

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	ctx := Continue(context.Background(), example)
	log.InfoContext(ctx, "with trace")
	log.Info("without trace")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines: %q", lines)
	}
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if first["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || first["component"] != "test" {
		t.Errorf("first line %v", first)
	}
	if _, ok := second["trace_id"]; ok {
		t.Errorf("second line %v has a trace id", second)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(example)
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01")
	f.Add("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		again, err := Parse(c.String())
		if err != nil || again != c {
			t.Fatalf("%q: round trip %q gave %v, %v", s, c.String(), again, err)
		}
		if strings.HasPrefix(s, "00-") && c.String() != s {
			t.Fatalf("version 00 %q renders as %q", s, c.String())
		}
	})
}
