package timeline

import (
	"bufio"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Histogram is one Prometheus histogram series scraped from a /metrics page.
type Histogram struct {
	Labels  map[string]string // without "le"
	Buckets []Bucket          // ascending upper bounds, cumulative counts, +Inf last
	Count   float64
	Sum     float64
}

// Bucket is one cumulative bucket.
type Bucket struct {
	LE    float64
	Count float64
}

// ParseHistograms reads every series of the histogram name from Prometheus text exposition
// format. Lines it does not understand are skipped.
func ParseHistograms(text, name string) ([]Histogram, error) {
	series := map[string]*Histogram{}
	var order []string
	get := func(labels map[string]string) *Histogram {
		key := labelKey(labels)
		h := series[key]
		if h == nil {
			h = &Histogram{Labels: labels}
			series[key] = h
			order = append(order, key)
		}
		return h
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, name) {
			continue
		}
		metric, labels, value, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", line, err)
		}
		switch metric {
		case name + "_bucket":
			le, err := strconv.ParseFloat(labels["le"], 64)
			if err != nil {
				return nil, fmt.Errorf("parse %q: le: %w", line, err)
			}
			delete(labels, "le")
			h := get(labels)
			h.Buckets = append(h.Buckets, Bucket{LE: le, Count: value})
		case name + "_count":
			get(labels).Count = value
		case name + "_sum":
			get(labels).Sum = value
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]Histogram, 0, len(order))
	for _, k := range order {
		h := *series[k]
		slices.SortFunc(h.Buckets, func(a, b Bucket) int { return cmpFloat(a.LE, b.LE) })
		out = append(out, h)
	}
	return out, nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func labelKey(l map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(l)) {
		b.WriteString(k + "=" + l[k] + "\x00")
	}
	return b.String()
}

// parseSample splits `name{a="b",c="d"} 1.5` (an optional timestamp is ignored).
func parseSample(line string) (name string, labels map[string]string, value float64, err error) {
	labels = map[string]string{}
	rest := line
	if i := strings.IndexAny(rest, "{ "); i < 0 {
		return "", nil, 0, fmt.Errorf("no value")
	} else {
		name, rest = rest[:i], rest[i:]
	}
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return "", nil, 0, fmt.Errorf("bad label list")
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			closed := false
			for i := 0; i < len(rest); i++ {
				c := rest[i]
				if c == '\\' && i+1 < len(rest) {
					i++
					switch rest[i] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[i])
					}
					continue
				}
				if c == '"' {
					rest, closed = rest[i+1:], true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return "", nil, 0, fmt.Errorf("unterminated label value")
			}
			labels[key] = val.String()
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", nil, 0, fmt.Errorf("no value")
	}
	value, err = strconv.ParseFloat(fields[0], 64)
	return name, labels, value, err
}

// Merge adds up the series whose labels include every pair of match; ok is false when none
// does. Series must share bucket bounds, as the series of one histogram do.
func Merge(hs []Histogram, match map[string]string) (Histogram, bool) {
	var out Histogram
	found := false
	for _, h := range hs {
		if !matches(h.Labels, match) {
			continue
		}
		if !found {
			out = Histogram{Labels: maps.Clone(match), Buckets: slices.Clone(h.Buckets), Count: h.Count, Sum: h.Sum}
			found = true
			continue
		}
		if len(h.Buckets) != len(out.Buckets) {
			continue
		}
		for i := range out.Buckets {
			out.Buckets[i].Count += h.Buckets[i].Count
		}
		out.Count += h.Count
		out.Sum += h.Sum
	}
	return out, found
}

func matches(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// Quantile estimates the q-quantile as PromQL's histogram_quantile does: linear
// interpolation inside the bucket that holds the rank. It is an estimate, only as fine as
// the buckets; NaN when the histogram is empty.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 || len(h.Buckets) == 0 {
		return math.NaN()
	}
	rank := q * h.Count
	lower, below := 0.0, 0.0
	for _, b := range h.Buckets {
		if b.Count >= rank {
			if math.IsInf(b.LE, 1) {
				return lower
			}
			if b.Count == below {
				return b.LE
			}
			return lower + (b.LE-lower)*(rank-below)/(b.Count-below)
		}
		lower, below = b.LE, b.Count
	}
	return lower
}

// Mean is Sum/Count, exact whatever the buckets; NaN when empty.
func (h Histogram) Mean() float64 {
	if h.Count == 0 {
		return math.NaN()
	}
	return h.Sum / h.Count
}

// HistogramStat summarises a scraped histogram (seconds) as a Stat in milliseconds; the
// median and p90 are bucket estimates and Max is left 0 (a histogram does not keep it).
func HistogramStat(phase, from, to, source string, h Histogram) Stat {
	return Stat{
		Phase: phase, From: from, To: to, N: int(h.Count), Source: source,
		MedianMS: math.Round(h.Quantile(0.5)*1e6) / 1e3,
		P90MS:    math.Round(h.Quantile(0.9)*1e6) / 1e3,
		Note:     fmt.Sprintf("bucket estimate; exact mean %.3f ms", h.Mean()*1e3),
	}
}
