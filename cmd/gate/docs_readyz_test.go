package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// readyzReasonFuncs are, per package, the functions that build /readyz's reasons other
// than through a reason sink (readyzSinks): each string they append, put in a []string
// literal, store in a map or return (when they return only strings, the last) is a reason.
var readyzReasonFuncs = map[string][]string{
	"internal/consume":   {"NotReady", "stallProblem", "awaitPreflight", "preflight", "diagnoseOutputs", "retriedProblems", "compactedProblem", "topicProblemKind", "plainListener"},
	"internal/gate":      {"OverridesNotReady"},
	"internal/endpoints": {"waiting", "shutdownReasons"},
}

// readyzSinks are the consumer's methods that make a message a /readyz reason, and which
// of their arguments it is (problems.set's, on the problems field, is the second).
var readyzSinks = map[string]int{"logProblem": 2, "halt": 1, "sayStopped": 1, "set": 1}

// TestDocsReadyzTableNamesEveryReason: every reason the gate gives on /readyz (a starting
// gate's "kafka: waiting for the cluster before consuming: ..." among them) has a row in
// operations.md's /readyz table, and every reason the table names is one the code gives,
// word for word where the table quotes it. The reasons are read from the source: each
// message given to a reason sink or built by a reason function, its format's verbs and
// the values joined to it taken as anything ("…" in the table).
func TestDocsReadyzTableNamesEveryReason(t *testing.T) {
	var reasons []string
	for dir, funcs := range readyzReasonFuncs {
		reasons = append(reasons, readyzReasons(t, filepath.Join("..", "..", dir), funcs)...)
	}
	slices.Sort(reasons)
	reasons = slices.Compact(reasons)
	if len(reasons) < 20 {
		t.Fatalf("read only %d /readyz reasons from the source: %q", len(reasons), reasons)
	}
	documented := readyzTable(t)
	used := make([]bool, len(documented))
	for _, r := range reasons {
		found := false
		for i, d := range documented {
			if d.MatchString(r) {
				found, used[i] = true, true
			}
		}
		if !found {
			t.Errorf("the /readyz reason %q (each X any value) is in no row of docs/operations.md's /readyz table", r)
		}
	}
	for i, d := range documented {
		if !used[i] {
			t.Errorf("docs/operations.md's /readyz table names %s, a reason the gate never gives", d)
		}
	}
}

// readyzTable reads the quoted reasons of the first column of operations.md's /readyz
// table, each as a pattern in which "…" is anything.
func readyzTable(t *testing.T) []*regexp.Regexp {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "### /readyz and /healthz: what each reason means")
	if !ok {
		t.Fatal("docs/operations.md has no /readyz section")
	}
	table, _, _ = strings.Cut(table, "\n###")
	var out []*regexp.Regexp
	code := regexp.MustCompile("`([^`]+)`")
	for line := range strings.SplitSeq(table, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| reason |") {
			continue
		}
		first := strings.SplitN(line, " | ", 2)[0]
		spans := code.FindAllStringSubmatch(first, -1)
		if len(spans) == 0 {
			t.Errorf("the /readyz table's row %q quotes no reason", first)
		}
		for _, m := range spans {
			out = append(out, regexp.MustCompile("^"+strings.ReplaceAll(regexp.QuoteMeta(m[1]), "…", ".*")+"$"))
		}
	}
	return out
}

// readyzReasons reads the reasons the non-test Go files of dir give: messages given to a
// reason sink anywhere, and the strings funcs build.
func readyzReasons(t *testing.T, dir string, funcs []string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	decls := map[string][]*ast.FuncDecl{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				decls[fd.Name.Name] = append(decls[fd.Name.Name], fd)
			}
		}
	}
	r := reasonReader{decls: decls}
	var out []string
	keep := func(ss []string) {
		for _, s := range ss {
			if strings.Trim(s, "X") != "" {
				out = append(out, s)
			}
		}
	}
	for _, fds := range decls {
		for _, fd := range fds {
			reasonFunc := slices.Contains(funcs, fd.Name.Name)
			ast.Inspect(fd, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
						i, sink := readyzSinks[sel.Sel.Name]
						if recv, ok := sel.X.(*ast.SelectorExpr); sel.Sel.Name == "set" && (!ok || recv.Sel.Name != "problems") {
							sink = false
						}
						if sink && i < len(n.Args) {
							keep(r.samples(fd, n.Args[i], 0))
						}
					}
					if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "append" && reasonFunc {
						for _, a := range n.Args[1:] {
							keep(r.samples(fd, a, 0))
						}
					}
				case *ast.CompositeLit:
					if reasonFunc {
						for _, e := range n.Elts {
							keep(r.samples(fd, e, 0))
						}
					}
				case *ast.AssignStmt:
					if _, ok := n.Lhs[0].(*ast.IndexExpr); ok && reasonFunc {
						keep(r.samples(fd, n.Rhs[0], 0))
					}
				case *ast.ReturnStmt:
					// The last of a function's string results: topicProblemKind's
					// (kind, problem).
					if reasonFunc && len(n.Results) > 0 && returnsStrings(fd) {
						keep(r.samples(fd, n.Results[len(n.Results)-1], 0))
					}
				}
				return true
			})
		}
	}
	return out
}

// reasonReader turns a string expression into the texts it may have, X standing for
// any value.
type reasonReader struct{ decls map[string][]*ast.FuncDecl }

// returnsStrings reports whether fd's results are all strings (one or more, named or not).
func returnsStrings(fd *ast.FuncDecl) bool {
	res := fd.Type.Results
	if res == nil || len(res.List) == 0 {
		return false
	}
	for _, f := range res.List {
		if id, ok := f.Type.(*ast.Ident); !ok || id.Name != "string" {
			return false
		}
	}
	return true
}

func returnsString(fd *ast.FuncDecl) bool {
	res := fd.Type.Results
	if res == nil || len(res.List) != 1 {
		return false
	}
	id, ok := res.List[0].Type.(*ast.Ident)
	return ok && id.Name == "string"
}

var formatVerb = regexp.MustCompile(`%[-+# 0-9.]*[a-zA-Z%]`)

// samples returns the texts e may have in fd: literals as they are, a format's verbs
// and any other value as X (%q as "X"), a variable as each value fd assigns it, and a
// call of the package's own function returning a string as each of its returns but "".
func (r reasonReader) samples(fd *ast.FuncDecl, e ast.Expr, depth int) []string {
	if depth > 4 {
		return []string{"X"}
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind == token.STRING {
			s, err := strconv.Unquote(e.Value)
			if err == nil {
				return []string{s}
			}
		}
	case *ast.ParenExpr:
		return r.samples(fd, e.X, depth)
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			var out []string
			for _, a := range r.samples(fd, e.X, depth) {
				for _, b := range r.samples(fd, e.Y, depth) {
					out = append(out, a+b)
				}
			}
			return out
		}
	case *ast.Ident:
		var out []string
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == len(as.Rhs) {
				for i, l := range as.Lhs {
					if id, ok := l.(*ast.Ident); ok && id.Name == e.Name && as.Tok != token.ADD_ASSIGN {
						out = append(out, r.samples(fd, as.Rhs[i], depth+1)...)
					}
				}
			}
			return true
		})
		if len(out) > 0 {
			return out
		}
	case *ast.CallExpr:
		var name string
		switch f := e.Fun.(type) {
		case *ast.Ident:
			name = f.Name
		case *ast.SelectorExpr:
			if pkg, ok := f.X.(*ast.Ident); ok && pkg.Name == "fmt" && f.Sel.Name == "Sprintf" {
				var out []string
				for _, s := range r.samples(fd, e.Args[0], depth) {
					out = append(out, formatVerb.ReplaceAllStringFunc(s, func(v string) string {
						switch {
						case v == "%%":
							return "%"
						case strings.HasSuffix(v, "q"):
							return `"X"`
						}
						return "X"
					}))
				}
				return out
			}
			if recv, ok := f.X.(*ast.Ident); ok && recv.Name != "fmt" && recv.Name != "strings" {
				name = f.Sel.Name
			}
		}
		var out []string
		for _, callee := range r.decls[name] {
			if !returnsString(callee) {
				continue
			}
			ast.Inspect(callee.Body, func(n ast.Node) bool {
				if _, ok := n.(*ast.FuncLit); ok {
					return false
				}
				if ret, ok := n.(*ast.ReturnStmt); ok && len(ret.Results) == 1 {
					for _, s := range r.samples(callee, ret.Results[0], depth+1) {
						if s != "" {
							out = append(out, s)
						}
					}
				}
				return true
			})
		}
		if len(out) > 0 {
			return out
		}
	}
	return []string{"X"}
}
