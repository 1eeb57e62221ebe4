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
	got := c.Markdown()
	want := "boot\n\n| phase | from → to | vanilla | prebaked | measured by |\n|---|---|---:|---:|---|\n" +
		"| install | script start → install done | 27.00 s | – | bootstrap status |\n" +
		"| join | a → b | 1500 ms | 900 ms | status |\n"
	if got != want {
		t.Errorf("Markdown:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(got, "–") {
		t.Error("an unknown value is not shown as –")
	}
}
