package signature

import "encoding/json"

// predicateType returns the predicateType of an in-toto statement, or "" when payload is not one.
func predicateType(payload []byte) string {
	var s struct {
		PredicateType string `json:"predicateType"`
	}
	if json.Unmarshal(payload, &s) != nil {
		return ""
	}
	return s.PredicateType
}
