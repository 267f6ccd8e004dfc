// Package clientset gives tests client-go's typed clientset of a testenv apiserver. It is a
// package of its own because the clientset and the API types it registers are some 200
// packages: a test binary that imports testenv alone, as the decision tests of
// internal/reconcile do, links none of them.
package clientset

import (
	"sync"

	"k8s.io/client-go/kubernetes"

	"github.com/imagereflector/reflector/internal/testenv"
)

var clientsets sync.Map // *testenv.Env → kubernetes.Interface

// For returns a typed client of e's apiserver with admin rights, made once per Env.
func For(e *testenv.Env) kubernetes.Interface {
	if c, ok := clientsets.Load(e); ok {
		return c.(kubernetes.Interface)
	}
	c, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		// NewForConfig fails only on a configuration that testenv never makes (a rate limiter
		// without QPS, an unparsable host).
		panic("testenv's client configuration: " + err.Error())
	}
	got, _ := clientsets.LoadOrStore(e, c)
	return got.(kubernetes.Interface)
}
