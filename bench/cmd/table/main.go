// Command table reads `go test -bench` output of BenchmarkCursor on stdin
// and prints a markdown table: per implementation, the median ns/op and
// allocs/op of issue and verify over all runs (-count), the token length,
// and each median as a multiple of the matching floor's median. cpu-ns/op
// (thread CPU time, reported by the benchmarks on Linux) is shown beside
// ns/op because it is robust to other load on the machine.
//
// Usage: go test -run '^$' -bench . -count 5 | go run ./cmd/table
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

const (
	hmacFloor = "floor-hmac-sha256"
	gcmFloor  = "floor-aes-256-gcm"
)

func main() {
	aeadList := flag.String("aead", "securecookie-hash+block,paseto-v4-local,fernet,tink-aes-256-gcm,"+gcmFloor,
		"comma-separated implementations that encrypt; they are compared with the AES-GCM floor, the rest with the HMAC floor")
	all := flag.Bool("all", false, "print the median of every benchmark on stdin, one row each, instead of the cursor comparison")
	flag.Parse()
	if *all {
		if err := printAll(os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, "table:", err)
			os.Exit(1)
		}
		return
	}
	aead := map[string]bool{}
	for _, n := range strings.Split(*aeadList, ",") {
		aead[strings.TrimSpace(n)] = true
	}
	runs, order, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "table:", err)
		os.Exit(1)
	}
	if len(order) == 0 {
		fmt.Fprintln(os.Stderr, "table: no BenchmarkCursor results on stdin")
		os.Exit(1)
	}
	med := func(impl, op, unit string) (float64, bool) {
		v := runs[impl+"/"+op][unit]
		if len(v) == 0 {
			return 0, false
		}
		return median(v), true
	}
	ratio := func(impl, op, unit string) string {
		floor := hmacFloor
		if aead[impl] {
			floor = gcmFloor
		}
		v, ok1 := med(impl, op, unit)
		f, ok2 := med(floor, op, unit)
		if !ok1 || !ok2 || f == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", v/f)
	}
	num := func(impl, op, unit, format string) string {
		v, ok := med(impl, op, unit)
		if !ok {
			return "–"
		}
		return fmt.Sprintf(format, v)
	}
	fmt.Println("| implementation | issue ns/op | issue cpu-ns/op | issue allocs | verify ns/op | verify cpu-ns/op | verify allocs | token bytes | floor | issue × floor (ns / cpu) | verify × floor (ns / cpu) |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|")
	for _, impl := range order {
		floor := "HMAC"
		if aead[impl] {
			floor = "AES-GCM"
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s |\n", impl,
			num(impl, "issue", "ns/op", "%.0f"), num(impl, "issue", "cpu-ns/op", "%.0f"), num(impl, "issue", "allocs/op", "%.0f"),
			num(impl, "verify", "ns/op", "%.0f"), num(impl, "verify", "cpu-ns/op", "%.0f"), num(impl, "verify", "allocs/op", "%.0f"),
			num(impl, "verify", "token-B", "%.0f"), floor,
			ratio(impl, "issue", "ns/op"), ratio(impl, "issue", "cpu-ns/op"),
			ratio(impl, "verify", "ns/op"), ratio(impl, "verify", "cpu-ns/op"))
	}
	speedups(order, med)
}

// speedups prints how many times slower each other implementation is than
// ctoken, per operation, by wall and by CPU time.
func speedups(order []string, med func(impl, op, unit string) (float64, bool)) {
	times := func(impl, op, unit string) string {
		v, ok1 := med(impl, op, unit)
		c, ok2 := med("ctoken", op, unit)
		if !ok1 || !ok2 || c == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f×", v/c)
	}
	fmt.Println()
	fmt.Println("| time relative to ctoken | issue (ns / cpu) | verify (ns / cpu) |")
	fmt.Println("|---|---:|---:|")
	for _, impl := range order {
		if impl == "ctoken" {
			continue
		}
		fmt.Printf("| %s | %s / %s | %s / %s |\n", impl,
			times(impl, "issue", "ns/op"), times(impl, "issue", "cpu-ns/op"),
			times(impl, "verify", "ns/op"), times(impl, "verify", "cpu-ns/op"))
	}
}

// printAll prints one row per benchmark: the medians of ns/op, cpu-ns/op,
// B/op and allocs/op.
func printAll(r io.Reader) error {
	runs := map[string]map[string][]float64{}
	var order []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		m := runs[name]
		if m == nil {
			m = map[string][]float64{}
			runs[name] = m
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return fmt.Errorf("%q: %v", sc.Text(), err)
			}
			m[f[i+1]] = append(m[f[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	col := func(name, unit, format string) string {
		if v := runs[name][unit]; len(v) > 0 {
			return fmt.Sprintf(format, median(v))
		}
		return "–"
	}
	fmt.Println("| benchmark | ns/op | cpu-ns/op | B/op | allocs/op |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, name := range order {
		fmt.Printf("| %s | %s | %s | %s | %s |\n", strings.TrimPrefix(name, "Benchmark"),
			col(name, "ns/op", "%.0f"), col(name, "cpu-ns/op", "%.0f"),
			col(name, "B/op", "%.0f"), col(name, "allocs/op", "%.0f"))
	}
	return nil
}

// parse collects, per "impl/op" sub-benchmark, every value of every unit.
// order lists implementations in order of first appearance.
func parse(r io.Reader) (map[string]map[string][]float64, []string, error) {
	runs := map[string]map[string][]float64{}
	var order []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "BenchmarkCursor/") {
			continue
		}
		name := strings.TrimPrefix(f[0], "BenchmarkCursor/")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i] // the -GOMAXPROCS suffix
			}
		}
		slash := strings.LastIndexByte(name, '/')
		if slash < 0 {
			continue
		}
		if impl := name[:slash]; !slices.Contains(order, impl) {
			order = append(order, impl)
		}
		m := runs[name]
		if m == nil {
			m = map[string][]float64{}
			runs[name] = m
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, nil, fmt.Errorf("%q: %v", sc.Text(), err)
			}
			m[f[i+1]] = append(m[f[i+1]], v)
		}
	}
	return runs, order, sc.Err()
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}
