// Command push writes a small random image to a registry, as a build pipeline would:
//
//	go run ./hack/push 127.0.0.1:25000/demo/app:1.4.0
package main

import (
	"fmt"
	"os"

	"github.com/imagereflector/reflector/internal/stack"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: push host:port/repository:tag ...")
		os.Exit(2)
	}
	for _, ref := range os.Args[1:] {
		digest, err := stack.Push(ref)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("pushed %s@%s\n", ref, digest)
	}
}
