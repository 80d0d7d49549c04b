package demo

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/ovstream/ovstream/store/rollup"
	"github.com/ovstream/ovstream/store/visitstats"
)

// printOnTime prints the on-time performance of pipeline's stop visits
// over the whole network, under the North American and the CROW
// definitions (visitstats.NorthAmerica, CROW), read through db as
// `report --metric on-time --dimension network` reads it; or why a feed
// has no visits (its predictions carry no service day).
func printOnTime(ctx context.Context, w io.Writer, db rollup.Querier, pipeline string) error {
	var shares []string
	visits := int64(0)
	for _, d := range []visitstats.Definition{visitstats.NorthAmerica, visitstats.CROW} {
		rows, err := visitstats.Run(ctx, db, visitstats.Query{Metric: visitstats.OnTime, Pipeline: pipeline, Dimension: "network",
			From: time.Unix(0, 0), To: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), OnTime: d})
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			fmt.Fprintln(w, "stop visits: none (its predictions carry no start_date, the service day a visit needs)")
			return nil
		}
		visits = rows[0].Values[0].(int64)
		onTime := rows[0].Values[2].(int64)
		shares = append(shares, fmt.Sprintf("%.1f %% (%d) by %s (%.0f s early to %.0f s late)",
			100*float64(onTime)/float64(visits), onTime, d.Name, d.Early, d.Late))
	}
	fmt.Fprintf(w, "stop visits: %d; on time: %s, %s; per line: ovstream report --metric on-time\n", visits, shares[0], shares[1])
	return nil
}
