package timeline

import (
	"strings"
	"testing"
	"time"
)

func TestComparisonMarkdown(t *testing.T) {
	c := Comparison{Title: "boot", Columns: []string{"vanilla", "prebaked"}}
	at := time.Unix(1000, 0)
	c.Add("install", "script start", "install done", "bootstrap status", 27*time.Second, Between(time.Time{}, at))
	c.Add("join", "a", "b", "status", 1500*time.Millisecond, Between(at, at.Add(900*time.Millisecond)))
	c.Add("pod", "ready", "running", "watch", Between(at, at.Add(-5100*time.Millisecond)), 2*time.Second)
	c.Add("short", "x", "y", "z", time.Second)
	got := c.Markdown()
	want := "boot\n\n| phase | from → to | vanilla | prebaked | measured by |\n|---|---|---:|---:|---|\n" +
		"| install | script start → install done | 27.00 s | – | bootstrap status |\n" +
		"| join | a → b | 1500 ms | 900 ms | status |\n" +
		"| pod | ready → running | −5100 ms | 2000 ms | watch |\n" +
		"| short | x → y | 1000 ms | – | z |\n"
	if got != want {
		t.Errorf("Markdown:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(got, "–") {
		t.Error("an unknown value is not shown as –")
	}
}
