import java.io.File;
import java.time.LocalDate;
import org.opentripplanner.datastore.api.CompositeDataSource;
import org.opentripplanner.datastore.api.FileType;
import org.opentripplanner.datastore.file.DirectoryDataSource;
import org.opentripplanner.datastore.file.ZipFileDataSource;
import org.opentripplanner.ext.empiricaldelay.internal.csvinput.EmpiricalDelayCsvDataReader;
import org.opentripplanner.graph_builder.issue.service.DefaultDataImportIssueStore;

/**
 * Reads the empirical delay data at args[0] (a .zip file or a directory) with OpenTripPlanner's
 * own reader, feed id F, as its graph build does, and prints tab-separated lines: "issue", type,
 * message for each issue it recorded (a row it dropped); "day", date, service id (or "-") for
 * args[2] days from args[1]; "row", service id, trip id, stop id, stop sequence, p50 and p90 in
 * seconds for every delay it kept.
 */
public class Main {

  public static void main(String[] args) {
    File path = new File(args[0]);
    CompositeDataSource source = path.getName().endsWith(".zip")
      ? new ZipFileDataSource(path, FileType.EMPIRICAL_DATA)
      : new DirectoryDataSource(path, FileType.EMPIRICAL_DATA);
    var issues = new DefaultDataImportIssueStore();
    var reader = new EmpiricalDelayCsvDataReader(issues);
    reader.read(source, "F");
    for (var issue : issues.listIssues()) {
      System.out.println("issue\t" + issue.getType() + "\t" + issue.getMessage());
    }
    if (reader.calendar() == null) {
      System.out.println("issue\tNoCalendar\tthe files were not read");
      return;
    }
    LocalDate first = LocalDate.parse(args[1]);
    for (int i = 0; i < Integer.parseInt(args[2]); i++) {
      LocalDate d = first.plusDays(i);
      System.out.println("day\t" + d + "\t" + reader.calendar().findServiceId(d).orElse("-"));
    }
    for (var trip : reader.trips()) {
      for (var serviceId : trip.serviceIds()) {
        for (var delay : trip.delaysSortedForServiceId(serviceId)) {
          System.out.println(
            "row\t" + serviceId + "\t" + trip.tripId().getId() + "\t" + delay.stopId().getId() + "\t" +
            delay.sequence() + "\t" + delay.empiricalDelay().p50().toSeconds() + "\t" +
            delay.empiricalDelay().p90().toSeconds()
          );
        }
      }
    }
  }
}
