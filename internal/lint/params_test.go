package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxParams is the most parameters a function or method under internal/ may take. Past it, a
// call site reads as a row of positional values; an options struct, a small type or a method on
// a receiver that already holds the context names them.
const maxParams = 5

// TestFunctionsTakeAtMostFiveParameters fails for each function, method and interface method
// declared under internal/, tests included, that takes more than maxParams parameters. Receivers
// do not count; generated files (zz_generated*) and what the go tool does not build (testdata,
// directories starting with "." or "_") are left out. Function literals are left out too: a
// fuzz target's arguments are its parameters by the fuzzing engine's design.
func TestFunctionsTakeAtMostFiveParameters(t *testing.T) {
	root := filepath.Join("..") // internal/
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// The go tool builds nothing from these, and their files need not even parse.
			if name := d.Name(); path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasPrefix(d.Name(), "zz_generated") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				checked++
				if c := countParams(n.Type.Params); c > maxParams {
					t.Errorf("%s: %s takes %d parameters, more than %d", fset.Position(n.Pos()), n.Name.Name, c, maxParams)
				}
			case *ast.InterfaceType:
				for _, m := range n.Methods.List {
					ft, ok := m.Type.(*ast.FuncType)
					if !ok || len(m.Names) == 0 {
						continue
					}
					checked++
					if c := countParams(ft.Params); c > maxParams {
						t.Errorf("%s: interface method %s takes %d parameters, more than %d", fset.Position(m.Pos()), m.Names[0].Name, c, maxParams)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The walk must have found the tree, or it could pass by reading nothing.
	if checked < 1000 {
		t.Fatalf("checked %d functions under %s; expected the whole of internal/", checked, root)
	}
}

// countParams counts a parameter list's names; an unnamed parameter counts as one.
func countParams(fl *ast.FieldList) int {
	n := 0
	for _, f := range fl.List {
		n += max(len(f.Names), 1)
	}
	return n
}

// TestCountParams pins the counting that the check above rests on.
func TestCountParams(t *testing.T) {
	for src, want := range map[string]int{
		"func f()":                                0,
		"func f(a, b int, c string)":              3,
		"func f(int, string, ...byte)":            3,
		"func (r T) f(a int)":                     1,
		"func f[T any](a, b T, c, d, e T, g int)": 6,
	} {
		file, err := parser.ParseFile(token.NewFileSet(), "x.go", "package p\n"+src+" {}", 0)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		fn := file.Decls[0].(*ast.FuncDecl)
		if got := countParams(fn.Type.Params); got != want {
			t.Errorf("%s: got %d parameters, want %d", src, got, want)
		}
	}
}
