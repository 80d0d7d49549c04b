package consumer

import (
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// descRE reads a prometheus.Desc's String(): its name, help and labels.
var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), .*variableLabels: \{([^}]*)\}\}$`)

// MetricsTable writes to w the Markdown table rows of every series of
// Metrics, in the order of its fields: `| name | type | labels | help |`.
// It fails on a field whose description it cannot read.
func MetricsTable(w io.Writer) error {
	m := reflect.ValueOf(NewMetrics(nil)).Elem()
	for i := 0; i < m.NumField(); i++ {
		if !m.Type().Field(i).IsExported() {
			continue
		}
		c, ok := m.Field(i).Interface().(prometheus.Collector)
		if !ok {
			continue
		}
		kind, err := metricKind(c)
		if err != nil {
			return fmt.Errorf("consumer.Metrics.%s: %w", m.Type().Field(i).Name, err)
		}
		descs := make(chan *prometheus.Desc, 1)
		c.Describe(descs)
		d := descRE.FindStringSubmatch((<-descs).String())
		if d == nil {
			return fmt.Errorf("consumer.Metrics.%s: cannot read its description", m.Type().Field(i).Name)
		}
		name, err1 := strconv.Unquote(d[1])
		help, err2 := strconv.Unquote(d[2])
		if err1 != nil || err2 != nil {
			return fmt.Errorf("consumer.Metrics.%s: cannot read its description", m.Type().Field(i).Name)
		}
		labels := "-"
		if d[3] != "" {
			labels = "`" + strings.ReplaceAll(d[3], ",", "`, `") + "`"
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s |\n", name, kind, labels, strings.ReplaceAll(help, "|", `\|`))
	}
	return nil
}

func metricKind(c prometheus.Collector) (string, error) {
	switch m := c.(type) { // a Gauge has Inc and Add too: ask for it before Counter
	case *prometheus.HistogramVec, prometheus.Histogram:
		return "histogram", nil
	case *prometheus.GaugeVec, prometheus.Gauge:
		return "gauge", nil
	case *prometheus.CounterVec, prometheus.Counter:
		return "counter", nil
	case prometheus.Metric: // a GaugeFunc or CounterFunc: the same type; its sample says which
		var s dto.Metric
		if err := m.Write(&s); err != nil {
			return "", err
		}
		switch {
		case s.Gauge != nil:
			return "gauge", nil
		case s.Counter != nil:
			return "counter", nil
		}
	}
	return "", fmt.Errorf("a %T: neither counter, gauge nor histogram", c)
}
