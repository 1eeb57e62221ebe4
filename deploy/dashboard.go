package deploy

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// DashboardJSON is deploy/grafana/prebake-timeline.json: the Grafana dashboard of the scale-up
// timeline (docs/timeline.md, "Dashboard").
//
//go:embed grafana/prebake-timeline.json
var DashboardJSON []byte

// Dashboard is the part of Grafana's dashboard model (schemaVersion 39) the shipped
// dashboard uses. LoadDashboard decodes strictly into it: a field it does not declare is an
// error, so the file can't drift into something Grafana reads differently unnoticed.
type Dashboard struct {
	UID           string         `json:"uid"`
	Title         string         `json:"title"`
	Description   string         `json:"description"`
	Tags          []string       `json:"tags"`
	SchemaVersion int            `json:"schemaVersion"`
	Version       int            `json:"version"`
	Editable      bool           `json:"editable"`
	GraphTooltip  int            `json:"graphTooltip"`
	Refresh       string         `json:"refresh"`
	Timezone      string         `json:"timezone"`
	Time          DashboardRange `json:"time"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// DashboardRange is the default time range.
type DashboardRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Variable is a template variable.
type Variable struct {
	Name       string         `json:"name"`
	Label      string         `json:"label"`
	Type       string         `json:"type"` // datasource or query
	Query      string         `json:"query"`
	Datasource *DataSourceRef `json:"datasource,omitempty"`
	Refresh    int            `json:"refresh,omitempty"`
	Multi      bool           `json:"multi,omitempty"`
	IncludeAll bool           `json:"includeAll,omitempty"`
	AllValue   string         `json:"allValue,omitempty"`
	Sort       int            `json:"sort,omitempty"`
}

// DataSourceRef names a data source; the panels use the ${datasource} variable.
type DataSourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Panel is one panel: a timeseries or a bargauge.
type Panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	GridPos     GridPos        `json:"gridPos"`
	Datasource  *DataSourceRef `json:"datasource"`
	Targets     []Target       `json:"targets"`
	FieldConfig FieldConfig    `json:"fieldConfig"`
	Options     PanelOptions   `json:"options"`
}

// GridPos places a panel on the 24-column grid.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Target is one Prometheus query.
type Target struct {
	RefID        string         `json:"refId"`
	Expr         string         `json:"expr"`
	LegendFormat string         `json:"legendFormat"`
	Datasource   *DataSourceRef `json:"datasource"`
	Instant      bool           `json:"instant,omitempty"`
}

// FieldConfig sets the unit of a panel's values.
type FieldConfig struct {
	Defaults struct {
		Unit string   `json:"unit"`
		Min  *float64 `json:"min,omitempty"`
	} `json:"defaults"`
	Overrides []json.RawMessage `json:"overrides"`
}

// PanelOptions are a timeseries' legend and tooltip, or a bargauge's reduction.
type PanelOptions struct {
	Legend *struct {
		DisplayMode string   `json:"displayMode"`
		Placement   string   `json:"placement"`
		ShowLegend  bool     `json:"showLegend"`
		Calcs       []string `json:"calcs"`
	} `json:"legend,omitempty"`
	Tooltip *struct {
		Mode string `json:"mode"`
		Sort string `json:"sort"`
	} `json:"tooltip,omitempty"`
	ReduceOptions *struct {
		Calcs  []string `json:"calcs"`
		Fields string   `json:"fields"`
		Values bool     `json:"values"`
	} `json:"reduceOptions,omitempty"`
	Orientation string `json:"orientation,omitempty"`
	DisplayMode string `json:"displayMode,omitempty"`
}

// LoadDashboard decodes data strictly and checks that it holds together: unique panel ids on
// the grid without overlaps, every query on the ${datasource} variable with only defined
// variables, and PromQL with balanced brackets over prebake's metrics.
func LoadDashboard(data []byte) (Dashboard, error) {
	var d Dashboard
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Dashboard{}, fmt.Errorf("dashboard: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Dashboard{}, errors.New("dashboard: data after the JSON object")
	}
	return d, d.check()
}

// builtinVariables are Grafana's own.
var builtinVariables = []string{"__rate_interval", "__interval", "__range"}

var variableRef = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

func (d Dashboard) check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if d.UID == "" || len(d.UID) > 40 || d.Title == "" {
		bad("uid %q (1–40 characters) and title %q must be set", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 {
		bad("schemaVersion %d: the model is Grafana's 36 or later (datasource references by uid)", d.SchemaVersion)
	}
	vars := slices.Clone(builtinVariables)
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
		switch v.Type {
		case "datasource":
			if v.Query != "prometheus" {
				bad("variable %s: datasource query %q, want prometheus", v.Name, v.Query)
			}
		case "query":
			if v.Datasource == nil || v.Datasource.UID != "${datasource}" || v.Query == "" {
				bad("variable %s: want a query on ${datasource}", v.Name)
			}
		default:
			bad("variable %s: type %q, want datasource or query", v.Name, v.Type)
		}
	}
	if !slices.Contains(vars, "datasource") {
		bad("no datasource variable: the panels would be bound to one data source's uid")
	}
	ids := map[int]string{}
	for i, p := range d.Panels {
		at := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.ID <= 0 || ids[p.ID] != "" {
			bad("%s: id must be positive and unique (also %q)", at, ids[p.ID])
		}
		ids[p.ID] = p.Title
		if p.Type != "timeseries" && p.Type != "bargauge" {
			bad("%s: type %q, want timeseries or bargauge", at, p.Type)
		}
		g := p.GridPos
		if g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			bad("%s: gridPos %+v is off the 24-column grid", at, g)
		}
		for _, q := range d.Panels[:i] {
			o := q.GridPos
			if g.X < o.X+o.W && o.X < g.X+g.W && g.Y < o.Y+o.H && o.Y < g.Y+g.H {
				bad("%s overlaps panel %d %q", at, q.ID, q.Title)
			}
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			bad("%s: datasource must be ${datasource}", at)
		}
		if len(p.Targets) == 0 {
			bad("%s: no queries", at)
		}
		refs := map[string]bool{}
		for _, t := range p.Targets {
			if t.RefID == "" || refs[t.RefID] {
				bad("%s: refId %q empty or repeated", at, t.RefID)
			}
			refs[t.RefID] = true
			if t.Datasource == nil || t.Datasource.UID != "${datasource}" {
				bad("%s %s: datasource must be ${datasource}", at, t.RefID)
			}
			if err := checkExpr(t.Expr, vars); err != nil {
				bad("%s %s: %v", at, t.RefID, err)
			}
		}
	}
	return errors.Join(errs...)
}

func checkExpr(expr string, vars []string) error {
	if strings.TrimSpace(expr) == "" {
		return errors.New("empty expr")
	}
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inString := false
	for _, r := range expr {
		switch {
		case r == '"':
			inString = !inString
		case inString:
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("expr %q: unbalanced %q", expr, r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 || inString {
		return fmt.Errorf("expr %q: unclosed %q", expr, string(stack))
	}
	for _, m := range variableRef.FindAllStringSubmatch(expr, -1) {
		if !slices.Contains(vars, m[1]) {
			return fmt.Errorf("expr %q: variable $%s is not defined", expr, m[1])
		}
	}
	if len(metricRef.FindAllString(expr, -1)) == 0 {
		return fmt.Errorf("expr %q: queries no prebake_ metric", expr)
	}
	return nil
}

var metricRef = regexp.MustCompile(`\bprebake_[a-z0-9_]+`)

// MetricNames returns the series names the dashboard's queries and variables use, sorted:
// histogram series with their _bucket, _count or _sum suffix.
func (d Dashboard) MetricNames() []string {
	var names []string
	add := func(expr string) {
		for _, n := range metricRef.FindAllString(expr, -1) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	for _, v := range d.Templating.List {
		add(v.Query)
	}
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			add(t.Expr)
		}
	}
	slices.Sort(names)
	return names
}
