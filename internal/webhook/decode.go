package webhook

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// decodeJSON decodes a JSON object into v, failing with ErrMalformed.
func decodeJSON(data []byte, v any) error {
	if problem := jsonProblem(data, v); problem != "" {
		return malformed("%s", problem)
	}
	return nil
}

// jsonProblem decodes a JSON object into v and describes what is wrong with it, or returns "".
// The description names the offending field in the payload's own terms rather than Go's, and a
// body that is not an object (null included) is a problem rather than silently empty.
func jsonProblem(data []byte, v any) string {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return "empty body"
	}
	if trimmed[0] != '{' {
		return "body is not a JSON object"
	}
	err := json.Unmarshal(data, v)
	if err == nil {
		return ""
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("invalid JSON at byte %d: %s", syntax.Offset, syntax.Error())
	case errors.As(err, &typ):
		// Value is "number 12" for numbers: keep the kind, not the sender's literal.
		got, _, _ := strings.Cut(typ.Value, " ")
		want := jsonKind(typ.Type.Kind().String())
		if typ.Field == "" {
			return fmt.Sprintf("got a JSON %s, want %s", got, want)
		}
		return fmt.Sprintf("field %s: got a JSON %s, want %s", quote(typ.Field), got, want)
	default:
		return "invalid JSON: " + quote(err.Error())
	}
}

// jsonKind names a Go kind the way a JSON sender thinks of it.
func jsonKind(kind string) string {
	switch kind {
	case "struct", "map":
		return "an object"
	case "slice", "array":
		return "an array"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	default:
		return "a " + kind
	}
}

// decodeBase64 decodes Pub/Sub message data, which is standard base64; padding is optional so
// that hand-made test messages work too.
func decodeBase64(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b, err = base64.RawStdEncoding.DecodeString(s)
	}
	if err != nil {
		return nil, fmt.Errorf("message data is not base64")
	}
	return b, nil
}

// bodyID derives a delivery id from a body, for sources that send none: a retry carries the
// same body and so gets the same id.
func bodyID(body []byte) string {
	sum := sha256.Sum256(body)
	return "body-sha256:" + hex.EncodeToString(sum[:16])
}
