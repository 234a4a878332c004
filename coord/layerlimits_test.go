package coord_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The size limits of coord's product code (issue 28 item 2): no function
// over maxFuncLines, at most maxLongFuncs over longFuncLines (where a long
// flat form reads better: a parser's switch, a table of SQL), no type with
// more than maxMethods methods, no package over maxPackageLines lines.
// Harnesses (coordtest, storetest, internal/scaleworker) and tests aside.
const (
	maxFuncLines    = 100
	longFuncLines   = 80
	maxLongFuncs    = 5
	maxMethods      = 40
	maxPackageLines = 4000
)

// harnesses are the coord folders whose code only tests run.
var harnesses = map[string]bool{"coordtest": true, "storetest": true, "internal/scaleworker": true}

// overLimit lists what breaks a limit still, each at its size when it was
// listed: it may shrink, never grow, and nothing may join it. Cut an entry
// below its limit and delete it (the test logs entries that are below).
var overLimit = map[string]int{
	"type pgstore.Store": 56,
}

// longForms are the functions allowed over longFuncLines (at most
// maxLongFuncs), each a flat form that reads better whole.
var longForms = map[string]string{
	"func jobconfig/quartz.Expression.nextAfter": "Quartz's next-fire search, field by field as Quartz computes it",
	"func jobconfig/quartz.parser.afterNumber":   "a parser's switch over the token after a number",
	"func zkstore.Store.loop":                    "the event loop's one select over the client's events",
	"func pgstore.Store.multiBatch":              "one statement of SQL per request kind, in a table",
}

// TestLayerLimits measures coord's product code (go/ast: lines per
// function declaration, methods per receiver type, lines per package) and
// fails when a limit above is broken by code not listed in overLimit, or a
// listed entry grew.
func TestLayerLimits(t *testing.T) {
	if len(longForms) > maxLongFuncs {
		t.Fatalf("%d long forms listed, at most %d allowed", len(longForms), maxLongFuncs)
	}
	sizes := measureCoord(t)
	var names []string
	for n := range sizes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		size := sizes[n]
		limit := maxPackageLines
		switch {
		case strings.HasPrefix(n, "func "):
			// Over longFuncLines only the long forms listed, and
			// none of them over maxFuncLines.
			limit = longFuncLines
			if _, ok := longForms[n]; ok {
				limit = maxFuncLines
			}
		case strings.HasPrefix(n, "type "):
			limit = maxMethods
		}
		listed, ok := overLimit[n]
		switch {
		case size <= limit && ok:
			t.Logf("%s is %d now, within its limit %d: delete it from overLimit", n, size, limit)
		case size > limit && !ok:
			t.Errorf("%s is %d, over its limit %d", n, size, limit)
		case size > limit && size > listed:
			t.Errorf("%s grew to %d from %d (its limit is %d): cut it instead", n, size, listed, limit)
		}
	}
	for n := range longForms {
		if _, ok := sizes[n]; !ok {
			t.Logf("long form %s not found: delete it from longForms", n)
		}
	}
}

// measureCoord returns, for coord's product code, the lines of every
// function ("func pkg.Recv.Name"), the methods of every type ("type
// pkg.Name") and the lines of every package ("package pkg"), pkg being the
// folder below coord ("" for coord itself).
func measureCoord(t *testing.T) map[string]int {
	t.Helper()
	sizes := map[string]int{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if harnesses[filepath.ToSlash(path)] || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(path))
		if pkg == "." {
			pkg = ""
		}
		sizes["package "+pkg] += fset.Position(f.End()).Line
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			name := fd.Name.Name
			if recv := receiverName(fd); recv != "" {
				sizes["type "+pkg+"."+recv]++
				name = recv + "." + name
			}
			sizes["func "+pkg+"."+name] = fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sizes
}

// receiverName is the name of fd's receiver type; "" for a function.
func receiverName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	typ := fd.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	switch x := typ.(type) {
	case *ast.IndexExpr:
		typ = x.X
	case *ast.IndexListExpr:
		typ = x.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
