package tests

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// undocumented lists the exported identifiers of the Go package in dir
// (its non-test files) that have no doc comment, as "file:line: name":
// the package clause, types, functions, methods of exported types,
// constants and variables (a comment on their group counts), exported
// fields of exported structs and exported methods of exported interfaces
// (a comment of their own, at the line's end, or on the run of fields
// they start or belong to that names them).
func undocumented(dir string) ([]string, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var bad []string
	at := func(n ast.Node, what string) {
		p := fset.Position(n.Pos())
		bad = append(bad, fmt.Sprintf("%s:%d: %s", filepath.Base(p.Filename), p.Line, what))
	}
	for _, pkg := range pkgs {
		if pkg.Name == "main" {
			continue
		}
		hasPkgDoc := false
		var files []string
		for name := range pkg.Files {
			files = append(files, name)
		}
		sort.Strings(files)
		for _, name := range files {
			f := pkg.Files[name]
			if f.Doc != nil {
				hasPkgDoc = true
			}
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() || d.Doc != nil {
						continue
					}
					if d.Recv != nil {
						if recv := recvName(d.Recv.List[0].Type); !ast.IsExported(recv) {
							continue
						} else {
							at(d, recv+"."+d.Name.Name)
						}
						continue
					}
					at(d, d.Name.Name)
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							if s.Doc == nil && s.Comment == nil && d.Doc == nil {
								at(s, "type "+s.Name.Name)
							}
							typeDoc := s.Doc.Text() + d.Doc.Text()
							switch t := s.Type.(type) {
							case *ast.StructType:
								fieldsUndocumented(fset, t.Fields, s.Name.Name, typeDoc, at)
							case *ast.InterfaceType:
								fieldsUndocumented(fset, t.Methods, s.Name.Name, typeDoc, at)
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() && s.Doc == nil && s.Comment == nil && d.Doc == nil {
									at(n, n.Name)
								}
							}
						}
					}
				}
			}
		}
		if !hasPkgDoc {
			bad = append(bad, "package "+pkg.Name+": no package comment")
		}
	}
	return bad, nil
}

// recvName is the type name of a method's receiver (T, *T, T[P]).
func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// fieldsUndocumented reports the exported fields (or interface methods) of
// fl without a comment: their own (above or at the line's end), that of
// the run of fields (no blank line between) they belong to when it names
// them, or the type's doc (typeDoc) when it names them.
func fieldsUndocumented(fset *token.FileSet, fl *ast.FieldList, typ, typeDoc string, at func(ast.Node, string)) {
	if fl == nil {
		return
	}
	runDoc, prevEnd := "", -10
	for _, f := range fl.List {
		line := fset.Position(f.Pos()).Line
		if f.Doc != nil {
			line = fset.Position(f.Doc.Pos()).Line
			runDoc = f.Doc.Text()
		} else if line > prevEnd+1 {
			runDoc = ""
		}
		prevEnd = fset.Position(f.End()).Line
		for _, n := range f.Names {
			if !n.IsExported() || f.Doc != nil || f.Comment != nil {
				continue
			}
			if !namesWord(runDoc, n.Name) && !namesWord(typeDoc, n.Name) {
				at(n, typ+"."+n.Name)
			}
		}
		if len(f.Names) == 0 && f.Doc == nil && f.Comment == nil { // embedded
			if name := recvName(f.Type); ast.IsExported(name) && !namesWord(runDoc, name) && !namesWord(typeDoc, name) {
				at(f, typ+"."+name)
			}
		}
	}
}

// namesWord says whether text has name as a whole word.
func namesWord(text, name string) bool {
	return regexp.MustCompile(`(^|[^\pL\pN_])` + regexp.QuoteMeta(name) + `($|[^\pL\pN_])`).MatchString(text)
}

// TestClientDocComments: every exported identifier of the client packages
// (ingest/..., the public client API) has a doc comment, counted with
// go/ast; the count is logged.
func TestClientDocComments(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir("../ingest", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, dir := range dirs {
		bad, err := undocumented(dir)
		if err != nil {
			t.Fatal(err)
		}
		total += len(bad)
		for _, b := range bad {
			t.Errorf("%s: %s has no doc comment", strings.TrimPrefix(dir, "../"), b)
		}
	}
	t.Logf("%d packages under ingest/, %d undocumented exported identifiers", len(dirs), total)
}

// TestUndocumentedCatches: the counter finds an undocumented function,
// type, method, constant, field and package, and accepts a field named by
// its run's comment and a constant documented by its group.
func TestUndocumentedCatches(t *testing.T) {
	dir := t.TempDir()
	src := `package p

func F() {}

type T struct {
	// A and B are documented together.
	A, B int
	C    int

	// D is documented, and so is E by this run's comment.
	D int
	E int
	G int // G at the line's end
	H int
}

func (T) M() {}

// X and Y are documented by their group.
const (
	X = 1
	Y = 2
)

var V = 3

type I interface {
	N()
}

// W's Named field is named here.
type W struct {
	Named, Other int
}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	bad, err := undocumented(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(bad, "\n")
	for _, want := range []string{": F", "type T", "T.C", "T.H", "T.M", ": V", "type I", "I.N", "W.Other", "no package comment"} {
		if !strings.Contains(got, want) {
			t.Errorf("undocumented misses %q; got\n%s", want, got)
		}
	}
	for _, ok := range []string{"T.A", "T.B", "T.D", "T.E", "T.G", ": X", ": Y", "W.Named"} {
		if strings.Contains(got, ok+"\n") || strings.HasSuffix(got, ok) {
			t.Errorf("undocumented flags %q; got\n%s", ok, got)
		}
	}
}
