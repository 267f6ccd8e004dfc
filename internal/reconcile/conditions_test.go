package reconcile

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition messages mask URL userinfo whatever error they came from.
func TestConditionMessagesHideURLUserinfo(t *testing.T) {
	message := `listing tags: Get "https://robot:planted-password@127.0.0.1:5000/v2/": EOF`
	for name, mark := range map[string]func(*[]metav1.Condition){
		"failed":  func(c *[]metav1.Condition) { markFailed(c, 1, "ReadOperationFailed", message) },
		"stalled": func(c *[]metav1.Condition) { markStalled(c, 1, "ReadOperationFailed", message) },
	} {
		var conds []metav1.Condition
		mark(&conds)
		for _, c := range conds {
			if strings.Contains(c.Message, "planted-password") || !strings.Contains(c.Message, "https://xxxxx@127.0.0.1:5000/v2/") {
				t.Errorf("%s: %s message %q", name, c.Type, c.Message)
			}
		}
	}
}
