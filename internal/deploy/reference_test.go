package deploy

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// modulePath is the import path of the module's root.
const modulePath = "github.com/imagereflector/reflector"

// TestReferenceListsEverySetting fails for each environment variable that reflector's programs
// read and each flag they take that docs/reference.md has no row for. The programs are the
// packages under cmd/ and every package of the module they import; tests and hack/ are not
// among them. A variable counts when a literal or a constant names it in a call of os.Getenv or
// os.LookupEnv (or of a getenv parameter the caller fills with os.Getenv), or when a constant
// named Env... holds it.
func TestReferenceListsEverySetting(t *testing.T) {
	root := repoRoot(t)
	mod := newModule(root)
	programs, err := mod.programs()
	if err != nil {
		t.Fatal(err)
	}
	settings, flags, err := mod.reads(programs)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := readReference(filepath.Join(root, "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}

	// The scan must see each way a setting is read, or it could pass by finding nothing.
	for name, how := range map[string]string{
		"REFLECTOR_STORE_DIR":        "a literal",
		"REFLECTOR_ALLOWED_NETWORKS": "a constant of another package",
		"REFLECTOR_SIGSTORE_TUF_URL": "a constant of its own package",
		"LISTEN_FDNAMES":             "a getenv parameter",
		"REFLECTOR_WEBHOOK_BURST":    "a parameter that names the variable",
	} {
		if _, ok := settings[name]; !ok {
			t.Errorf("the scan of the programs did not find %s, read through %s", name, how)
		}
	}
	if _, ok := flags["cron"]["store-every"]; !ok {
		t.Errorf("the scan of the programs did not find cmd/cron's --store-every, a flag of a FlagSet")
	}
	if _, ok := flags["scan"]["drain"]; !ok {
		t.Errorf("the scan of the programs did not find cmd/scan's --drain, a flag of the flag package")
	}

	for _, name := range sortedKeys(settings) {
		if !doc.settings[name] {
			t.Errorf("docs/reference.md has no row for %s, read at %s", name, settings[name])
		}
	}
	for _, prog := range sortedKeys(flags) {
		for _, name := range sortedKeys(flags[prog]) {
			if !doc.flags[prog][name] {
				t.Errorf("docs/reference.md has no row for --%s under a heading that names `cmd/%s`; it is registered at %s", name, prog, flags[prog][name])
			}
		}
	}
}

// reference is what docs/reference.md documents: the first cell of each table row.
type reference struct {
	settings map[string]bool
	// flags holds the flags by the program (cmd/<program>) that the row's heading names.
	flags map[string]map[string]bool
}

var headingProgram = regexp.MustCompile("`cmd/([a-z]+)`")

// readReference reads the rows of the tables of path whose first cell is `NAME` (a setting) or
// `--name` (a flag of the program that the closest heading above names as `cmd/<program>`).
func readReference(path string) (reference, error) {
	f, err := os.Open(path)
	if err != nil {
		return reference{}, err
	}
	defer f.Close()
	ref := reference{settings: map[string]bool{}, flags: map[string]map[string]bool{}}
	var program string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			program = ""
			if m := headingProgram.FindStringSubmatch(line); m != nil {
				program = m[1]
			}
			continue
		}
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cell := strings.TrimSpace(strings.SplitN(line[1:], "|", 2)[0])
		if len(cell) < 3 || cell[0] != '`' || cell[len(cell)-1] != '`' {
			continue
		}
		name := cell[1 : len(cell)-1]
		if flag, ok := strings.CutPrefix(name, "--"); ok {
			if program != "" {
				if ref.flags[program] == nil {
					ref.flags[program] = map[string]bool{}
				}
				ref.flags[program][flag] = true
			}
			continue
		}
		ref.settings[name] = true
	}
	return ref, sc.Err()
}

// module parses the module's packages on demand.
type module struct {
	root string
	fset *token.FileSet
	pkgs map[string]*goPackage
}

// goPackage is one parsed package: its non-test files, string constants and functions.
type goPackage struct {
	path   string
	files  []*ast.File
	consts map[string]string
	funcs  map[string]*ast.FuncDecl
}

func newModule(root string) *module {
	return &module{root: root, fset: token.NewFileSet(), pkgs: map[string]*goPackage{}}
}

// programs returns the import paths of the commands under cmd/ and of every package of the
// module that they import, directly or not.
func (m *module) programs() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(m.root, "cmd"))
	if err != nil {
		return nil, err
	}
	var queue []string
	for _, e := range entries {
		if e.IsDir() {
			queue = append(queue, modulePath+"/cmd/"+e.Name())
		}
	}
	if len(queue) == 0 {
		return nil, fmt.Errorf("no command under %s", filepath.Join(m.root, "cmd"))
	}
	seen := map[string]bool{}
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		if seen[path] {
			continue
		}
		seen[path] = true
		p, err := m.load(path)
		if err != nil {
			return nil, err
		}
		for _, f := range p.files {
			for _, imp := range f.Imports {
				dep, _ := strconv.Unquote(imp.Path.Value)
				if strings.HasPrefix(dep, modulePath+"/") {
					queue = append(queue, dep)
				}
			}
		}
	}
	return sortedKeys(seen), nil
}

// load parses the non-test Go files of the package path of the module.
func (m *module) load(path string) (*goPackage, error) {
	if p, ok := m.pkgs[path]; ok {
		return p, nil
	}
	dir := filepath.Join(m.root, filepath.FromSlash(strings.TrimPrefix(path, modulePath)))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	p := &goPackage{path: path, consts: map[string]string{}, funcs: map[string]*ast.FuncDecl{}}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(m.fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, f)
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					p.funcs[d.Name.Name] = d
				}
			case *ast.GenDecl:
				if d.Tok != token.CONST {
					continue
				}
				for _, spec := range d.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, name := range vs.Names {
						if i < len(vs.Values) {
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								p.consts[name.Name], _ = strconv.Unquote(lit.Value)
							}
						}
					}
				}
			}
		}
	}
	m.pkgs[path] = p
	return p, nil
}

// envName is the shape of an environment variable's name.
var envName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// flagMethods are the functions of package flag and the methods of *flag.FlagSet that register
// a flag, with the position of the flag's name among their arguments.
var flagMethods = map[string]int{
	"Bool": 0, "BoolFunc": 0, "Duration": 0, "Float64": 0, "Func": 0, "Int": 0, "Int64": 0,
	"String": 0, "Uint": 0, "Uint64": 0,
	"BoolVar": 1, "DurationVar": 1, "Float64Var": 1, "IntVar": 1, "Int64Var": 1, "StringVar": 1,
	"TextVar": 1, "UintVar": 1, "Uint64Var": 1, "Var": 1,
}

// reads returns the environment variables that the packages read, each with where, and the
// flags that the commands among them register, by command (the directory under cmd/).
func (m *module) reads(paths []string) (settings map[string]string, flags map[string]map[string]string, err error) {
	settings, flags = map[string]string{}, map[string]map[string]string{}
	var errs []string
	declared := map[string]string{} // the variables that Env... constants name
	for _, path := range paths {
		p := m.pkgs[path]
		program, isCommand := strings.CutPrefix(path, modulePath+"/cmd/")
		for name, value := range p.consts {
			if strings.HasPrefix(strings.ToLower(name), "env") && envName.MatchString(value) {
				declared[value] = strings.TrimPrefix(p.path, modulePath+"/") + "." + name
			}
		}
		for _, f := range p.files {
			osName, flagName := importName(f, "os"), importName(f, "flag")
			flagSets := flagSetNames(f, flagName)
			inspectCalls(f, func(call *ast.CallExpr, fn *ast.FuncDecl) {
				pos := m.position(call)
				switch {
				case isPackageCall(call, osName, "Getenv", "LookupEnv") || isGetenvParam(call, fn):
					names, err := m.resolve(p, call.Args[0], fn, 0)
					if err != nil {
						errs = append(errs, fmt.Sprintf("%s: which variable is read: %v", pos, err))
					}
					for _, n := range names {
						if _, ok := settings[n]; !ok {
							settings[n] = pos
						}
					}
				case isCommand:
					sel, ok := call.Fun.(*ast.SelectorExpr)
					if !ok {
						return
					}
					recv, ok := sel.X.(*ast.Ident)
					i, registers := flagMethods[sel.Sel.Name]
					if !ok || !registers || (recv.Name != flagName && !flagSets[recv.Name]) || i >= len(call.Args) {
						return
					}
					names, err := m.resolve(p, call.Args[i], fn, 0)
					if err != nil {
						errs = append(errs, fmt.Sprintf("%s: which flag is registered: %v", pos, err))
					}
					for _, n := range names {
						if flags[program] == nil {
							flags[program] = map[string]string{}
						}
						flags[program][n] = pos
					}
				}
			})
		}
	}
	for name, where := range declared {
		if _, ok := settings[name]; !ok {
			settings[name] = where
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return settings, flags, nil
}

func (m *module) position(n ast.Node) string {
	pos := m.fset.Position(n.Pos())
	rel, err := filepath.Rel(m.root, pos.Filename)
	if err != nil {
		rel = pos.Filename
	}
	return fmt.Sprintf("%s:%d", filepath.ToSlash(rel), pos.Line)
}

// resolve returns the strings that expr, an argument within fn of package p, can hold: a
// literal, a constant of p or of another package of the module, or a parameter of fn, which
// stands for what each call of fn in p passes for it.
func (m *module) resolve(p *goPackage, expr ast.Expr, fn *ast.FuncDecl, depth int) ([]string, error) {
	switch e := expr.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			return []string{s}, err
		}
	case *ast.Ident:
		if s, ok := p.consts[e.Name]; ok {
			return []string{s}, nil
		}
		if i := paramIndex(fn, e.Name); i >= 0 && depth < 3 {
			return m.resolveCallers(p, fn, i, depth)
		}
	case *ast.SelectorExpr:
		pkg, ok := e.X.(*ast.Ident)
		if !ok {
			break
		}
		for _, f := range p.files {
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if !strings.HasPrefix(path, modulePath+"/") || importName(f, path) != pkg.Name {
					continue
				}
				dep, err := m.load(path)
				if err != nil {
					return nil, err
				}
				if s, ok := dep.consts[e.Sel.Name]; ok {
					return []string{s}, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("%s is neither a string literal, a constant of the module, nor a parameter filled by them", types.ExprString(expr))
}

// resolveCallers resolves the argument at index i of every call of fn within p.
func (m *module) resolveCallers(p *goPackage, fn *ast.FuncDecl, i, depth int) ([]string, error) {
	var (
		out  []string
		errs []error
	)
	calls := 0
	for _, f := range p.files {
		inspectCalls(f, func(call *ast.CallExpr, caller *ast.FuncDecl) {
			if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != fn.Name.Name || fn.Recv != nil || i >= len(call.Args) {
				return
			}
			calls++
			names, err := m.resolve(p, call.Args[i], caller, depth+1)
			out = append(out, names...)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", m.position(call), err))
			}
		})
	}
	if len(errs) > 0 {
		return out, errs[0]
	}
	if calls == 0 {
		return nil, fmt.Errorf("parameter %d of %s, which nothing in its package calls", i, fn.Name.Name)
	}
	return out, nil
}

// inspectCalls calls visit with every call in f and the function declaration it is in (nil for
// package-level initialisers).
func inspectCalls(f *ast.File, visit func(*ast.CallExpr, *ast.FuncDecl)) {
	for _, decl := range f.Decls {
		fn, _ := decl.(*ast.FuncDecl)
		ast.Inspect(decl, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				visit(call, fn)
			}
			return true
		})
	}
}

// importName is the name under which f imports path, or "" when it does not.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return path[strings.LastIndex(path, "/")+1:]
		}
	}
	return ""
}

// flagSetNames are the variables of f assigned a flag.NewFlagSet.
func flagSetNames(f *ast.File, flagName string) map[string]bool {
	names := map[string]bool{}
	if flagName == "" {
		return names
	}
	ast.Inspect(f, func(n ast.Node) bool {
		var lhs, rhs []ast.Expr
		switch s := n.(type) {
		case *ast.AssignStmt:
			lhs, rhs = s.Lhs, s.Rhs
		case *ast.ValueSpec:
			for _, id := range s.Names {
				lhs = append(lhs, id)
			}
			rhs = s.Values
		default:
			return true
		}
		for i, r := range rhs {
			if call, ok := r.(*ast.CallExpr); ok && i < len(lhs) && isPackageCall(call, flagName, "NewFlagSet") {
				if id, ok := lhs[i].(*ast.Ident); ok {
					names[id.Name] = true
				}
			}
		}
		return true
	})
	return names
}

// isPackageCall tells whether call calls one of funcs of the package imported as pkg.
func isPackageCall(call *ast.CallExpr, pkg string, funcs ...string) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || pkg == "" || len(call.Args) == 0 {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg && slices.Contains(funcs, sel.Sel.Name)
}

// isGetenvParam tells whether call calls a parameter of fn that has os.Getenv's or
// os.LookupEnv's type, which the callers fill with them (or with a stand-in in tests).
func isGetenvParam(call *ast.CallExpr, fn *ast.FuncDecl) bool {
	id, ok := call.Fun.(*ast.Ident)
	if !ok || len(call.Args) != 1 || fn == nil {
		return false
	}
	for _, field := range fn.Type.Params.List {
		ft, ok := field.Type.(*ast.FuncType)
		if !ok || len(ft.Params.List) != 1 || !isIdent(ft.Params.List[0].Type, "string") || ft.Results == nil || !isIdent(ft.Results.List[0].Type, "string") {
			continue
		}
		for _, name := range field.Names {
			if name.Name == id.Name {
				return true
			}
		}
	}
	return false
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// paramIndex is the position of the parameter name among fn's, or -1.
func paramIndex(fn *ast.FuncDecl, name string) int {
	if fn == nil {
		return -1
	}
	i := 0
	for _, field := range fn.Type.Params.List {
		for _, n := range field.Names {
			if n.Name == name {
				return i
			}
			i++
		}
		if len(field.Names) == 0 {
			i++
		}
	}
	return -1
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
