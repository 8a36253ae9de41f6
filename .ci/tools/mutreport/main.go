// Command mutreport summarizes gremlins JSON results as a per-file table and
// fails when efficacy falls below a threshold. scripts/mutation.sh runs it:
//
//	cd .ci/tools && go run ./mutreport -root DIR -survivors FILE -threshold PCT DIR=RESULT.json...
//
// Each argument pairs a package directory (relative to root, "." for the
// root package) with the -o output of one gremlins run in it. Efficacy is
// gremlins' own: killed / (killed + lived), timed-out and not-viable
// mutants left out. A surviving mutant that the survivors file documents as
// equivalent (by file, mutator and source line text, so the entry follows
// the line when it moves) is left out of the adjusted efficacy, which the
// threshold applies to; every other survivor is listed with its source
// line.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

type result struct {
	Files []struct {
		Filename  string `json:"file_name"`
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
}

type counts struct {
	killed, lived, equiv, notCovered, timedOut, notViable int
}

// survivor is one documented equivalent mutant.
type survivor struct {
	file, mutator, code string
	col                 int // column in the trimmed line; 0 matches any
}

// lived is a surviving (or timed-out) mutant and its source line.
type lived struct {
	file, mutator, code string
	line, col           int // col counts from 1 in the trimmed line
	equiv, timedOut     bool
}

// describe fills in l's source line and its column in the trimmed line,
// reading (once, into lines) the file l names under root.
func describe(l *lived, lines map[string][]string, root string, line, col int) error {
	src, ok := lines[l.file]
	if !ok {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(l.file)))
		if err != nil {
			return err
		}
		src = strings.Split(string(b), "\n")
		lines[l.file] = src
	}
	if line >= 1 && line <= len(src) {
		raw := src[line-1]
		l.code = strings.TrimSpace(raw)
		l.col = col - (len(raw) - len(strings.TrimLeft(raw, " \t")))
	}
	return nil
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mutreport:", err)
		os.Exit(1)
	}
}

// errBelow reports an efficacy under the threshold.
var errBelow = errors.New("adjusted efficacy is below the threshold")

// errNothingTested reports results in which no mutant was killed or lived.
var errNothingTested = errors.New("no mutant was tested (all not covered, not viable or timed out)")

// run writes the table for the results named in args to stdout and returns
// an error when an input is unusable or the threshold does not hold.
func run(args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("mutreport", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	root := fl.String("root", ".", "repository root")
	survivorsFile := fl.String("survivors", "", "markdown file documenting equivalent survivors")
	threshold := fl.Float64("threshold", 0, "minimum adjusted efficacy in percent")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() == 0 {
		return errors.New("no DIR=RESULT.json argument")
	}
	var docs []survivor
	if *survivorsFile != "" {
		var err error
		if docs, err = readSurvivors(*survivorsFile); err != nil {
			return err
		}
	}
	per := map[string]*counts{}
	var survivors []lived
	lines := map[string][]string{}
	for _, arg := range fl.Args() {
		dir, file, ok := strings.Cut(arg, "=")
		if !ok {
			return fmt.Errorf("argument %q is not DIR=RESULT.json", arg)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		var r result
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		for _, f := range r.Files {
			name := path.Join(dir, filepath.ToSlash(f.Filename))
			c := per[name]
			if c == nil {
				c = &counts{}
				per[name] = c
			}
			for _, m := range f.Mutations {
				switch m.Status {
				case "KILLED":
					c.killed++
				case "LIVED":
					c.lived++
					l := lived{file: name, mutator: m.Type, line: m.Line, col: m.Column}
					if err := describe(&l, lines, *root, m.Line, m.Column); err != nil {
						return err
					}
					l.equiv = documented(docs, l)
					if l.equiv {
						c.equiv++
					}
					survivors = append(survivors, l)
				case "NOT COVERED":
					c.notCovered++
				case "TIMED OUT":
					// Neither killed nor lived: listed, so a survivor
					// hidden by a slow machine is seen and rerun.
					c.timedOut++
					l := lived{file: name, mutator: m.Type, line: m.Line, col: m.Column, timedOut: true}
					if err := describe(&l, lines, *root, m.Line, m.Column); err != nil {
						return err
					}
					survivors = append(survivors, l)
				case "NOT VIABLE":
					c.notViable++
				}
			}
		}
	}
	names := make([]string, 0, len(per))
	for n := range per {
		names = append(names, n)
	}
	sort.Strings(names)
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	row := "%-28s %6s %6s %6s %8s %9s %10s %9s %9s\n"
	fmt.Fprintf(w, row, "file", "killed", "lived", "equiv", "not-cov", "timed-out", "not-viable", "efficacy", "adjusted")
	var total counts
	for _, n := range names {
		c := per[n]
		fmt.Fprintf(w, row, n, strconv.Itoa(c.killed), strconv.Itoa(c.lived), strconv.Itoa(c.equiv),
			strconv.Itoa(c.notCovered), strconv.Itoa(c.timedOut), strconv.Itoa(c.notViable), pct(c.killed, c.killed+c.lived), pct(c.killed, c.killed+c.lived-c.equiv))
		total.killed += c.killed
		total.lived += c.lived
		total.equiv += c.equiv
		total.notCovered += c.notCovered
		total.timedOut += c.timedOut
		total.notViable += c.notViable
	}
	fmt.Fprintf(w, row, "TOTAL", strconv.Itoa(total.killed), strconv.Itoa(total.lived), strconv.Itoa(total.equiv),
		strconv.Itoa(total.notCovered), strconv.Itoa(total.timedOut), strconv.Itoa(total.notViable), pct(total.killed, total.killed+total.lived), pct(total.killed, total.killed+total.lived-total.equiv))
	sort.Slice(survivors, func(i, j int) bool {
		if survivors[i].file != survivors[j].file {
			return survivors[i].file < survivors[j].file
		}
		return survivors[i].line < survivors[j].line
	})
	for _, s := range survivors {
		tag := "LIVED"
		switch {
		case s.equiv:
			tag = "equiv"
		case s.timedOut:
			tag = "TIMEOUT"
		}
		fmt.Fprintf(w, "%-7s %s:%d %s@%d  %s\n", tag, s.file, s.line, s.mutator, s.col, s.code)
	}
	tested := total.killed + total.lived - total.equiv
	if tested <= 0 {
		return errNothingTested
	}
	if adj := 100 * float64(total.killed) / float64(tested); adj < *threshold {
		return fmt.Errorf("%w: %.2f%% < %.2f%%", errBelow, adj, *threshold)
	}
	return nil
}

func pct(n, d int) string {
	if d <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(d))
}

func documented(docs []survivor, l lived) bool {
	for _, d := range docs {
		if d.file == l.file && d.mutator == l.mutator && d.code == l.code && (d.col == 0 || d.col == l.col) {
			return true
		}
	}
	return false
}

// readSurvivors reads the rows of the markdown table in p whose first cell
// is a .go file: | file | MUTATOR[@col] | `trimmed source line` | reason |.
// A | inside a cell is written \|.
func readSurvivors(p string) ([]survivor, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var out []survivor
	for i, line := range strings.Split(string(b), "\n") {
		cells := splitRow(line)
		if len(cells) < 4 || !strings.HasSuffix(cells[0], ".go") {
			continue
		}
		s := survivor{file: cells[0], code: strings.TrimSpace(strings.Trim(cells[2], "`"))}
		mut, col, hasCol := strings.Cut(cells[1], "@")
		s.mutator = mut
		if hasCol {
			if s.col, err = strconv.Atoi(col); err != nil || s.col < 1 {
				return nil, fmt.Errorf("%s:%d: column %q is not a positive number", p, i+1, col)
			}
		}
		if s.code == "" || strings.TrimSpace(cells[3]) == "" {
			return nil, fmt.Errorf("%s:%d: a survivor row needs the source line and a reason", p, i+1)
		}
		out = append(out, s)
	}
	return out, nil
}

// splitRow splits a markdown table row into trimmed cells, honouring \|.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") || len(line) < 2 {
		return nil
	}
	line = line[1 : len(line)-1]
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}
