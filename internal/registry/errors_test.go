package registry_test

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"

	v1 "github.com/imagereflector/reflector/internal/api/v1"
	"github.com/imagereflector/reflector/internal/registry"
)

func TestErrorHidesURLUserinfo(t *testing.T) {
	cause := &url.Error{Op: "Get", URL: "https://robot:planted-password@127.0.0.1:5000/v2/", Err: io.EOF}
	err := fmt.Errorf("scanning: %w", &registry.Error{Reason: v1.ReadOperationFailedReason,
		Err: fmt.Errorf("connecting to registry 127.0.0.1:5000: %w", cause)})
	if got, want := err.Error(), `scanning: connecting to registry 127.0.0.1:5000: Get "https://xxxxx@127.0.0.1:5000/v2/": EOF`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if strings.Contains(err.Error(), "planted-password") {
		t.Errorf("the error shows the password: %v", err)
	}
	if ue, ok := errors.AsType[*url.Error](err); !ok || ue != cause {
		t.Error("the cause is not reachable with errors.As")
	}
}
