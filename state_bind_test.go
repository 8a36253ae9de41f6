package ctoken

import (
	"strconv"
	"testing"
)

// BenchmarkStateDecodeSubjects measures Decode of request states bound to
// 64 subjects in turn, so that every call misses the bind-tag cache (it
// holds four tags a scratch): what Decode costs without the cache, beside
// BenchmarkStateDecode, where one subject always hits it.
func BenchmarkStateDecodeSubjects(b *testing.B) {
	for _, m := range benchModes {
		b.Run(m.name, func(b *testing.B) {
			c := benchCodec(b, m.mode)
			subjects := make([]string, 64)
			states := make([]string, len(subjects))
			for i := range subjects {
				// The benchmark's subject with its last characters
				// replaced: the same length, another tag.
				s := benchScope.CallerID
				subjects[i] = s[:len(s)-2] + strconv.Itoa(10+i)
				w, err := c.Encode(benchRequestState, subjects[i], "tools/call")
				if err != nil {
					b.Fatal(err)
				}
				states[i] = w
			}
			b.ReportAllocs()
			cpu := startCPU()
			i := 0
			for b.Loop() {
				if _, err := c.Decode(states[i], subjects[i], "tools/call"); err != nil {
					b.Fatal(err)
				}
				i = (i + 1) % len(states)
			}
			cpu.done(b)
		})
	}
}
