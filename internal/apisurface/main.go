// Command apisurface counts the exported names of Go packages, so that a
// change to a package users import can say what it did to its surface:
//
//	go run ./internal/apisurface ./dataflow ./sources/postgres
//	go run ./internal/apisurface -list ./dataflow   # and the names
//
// top counts the package-level names go doc lists (types, functions,
// constants, variables, one per name in a group, constructors included),
// methods the exported methods of exported types (interface methods
// included), fields the exported fields of exported structs. Test files are
// left out.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"strings"
)

func main() {
	list := flag.Bool("list", false, "print each name too")
	flag.Parse()
	fmt.Printf("%-28s %5s %7s %6s\n", "package", "top", "methods", "fields")
	for _, dir := range flag.Args() {
		s, err := count(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "apisurface:", err)
			os.Exit(1)
		}
		fmt.Printf("%-28s %5d %7d %6d\n", dir, len(s.top), len(s.methods), len(s.fields))
		if *list {
			for _, names := range [][]string{s.top, s.methods, s.fields} {
				for _, n := range names {
					fmt.Println("\t" + n)
				}
			}
		}
	}
}

// surface is one package's exported names, by kind.
type surface struct{ top, methods, fields []string }

func count(dir string) (surface, error) {
	var s surface
	fset := token.NewFileSet()
	notTest := func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }
	pkgs, err := parser.ParseDir(fset, dir, notTest, parser.ParseComments)
	if err != nil {
		return s, err
	}
	for _, p := range pkgs {
		if p.Name == "main" {
			continue
		}
		d := doc.New(p, dir, 0)
		values := func(vs []*doc.Value) {
			for _, v := range vs {
				for _, n := range v.Names {
					if ast.IsExported(n) {
						s.top = append(s.top, n)
					}
				}
			}
		}
		values(d.Consts)
		values(d.Vars)
		for _, f := range d.Funcs {
			s.top = append(s.top, f.Name)
		}
		for _, t := range d.Types {
			s.top = append(s.top, t.Name)
			values(t.Consts)
			values(t.Vars)
			for _, f := range t.Funcs {
				s.top = append(s.top, f.Name)
			}
			for _, m := range t.Methods {
				s.methods = append(s.methods, t.Name+"."+m.Name)
			}
			spec, ok := t.Decl.Specs[0].(*ast.TypeSpec)
			if !ok {
				continue
			}
			switch typ := spec.Type.(type) {
			case *ast.StructType:
				for _, f := range typ.Fields.List {
					for _, n := range f.Names {
						if n.IsExported() {
							s.fields = append(s.fields, t.Name+"."+n.Name)
						}
					}
				}
			case *ast.InterfaceType:
				for _, f := range typ.Methods.List {
					for _, n := range f.Names {
						if n.IsExported() {
							s.methods = append(s.methods, t.Name+"."+n.Name)
						}
					}
				}
			}
		}
	}
	return s, nil
}
