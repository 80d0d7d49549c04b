import java.io.File;
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import java.time.LocalDate;
import java.util.Collection;
import java.util.Optional;

/**
 * Reads the empirical delay data at args[0] (a .zip file or a directory) with OpenTripPlanner's
 * own reader, feed id F, as its graph build does, and prints tab-separated lines: "issue", type,
 * message for each issue it recorded (a row it dropped); "day", date, service id (or "-") for
 * args[2] days from args[1]; "row", service id, trip id, stop id, stop sequence, p50 and p90 in
 * seconds for every delay it kept.
 *
 * <p>OTP's classes are reached by reflection, so that this file compiles with the javac of Java 17
 * (which cannot read OTP's class files, built for Java 25) and runs on Java 25.
 */
public class Main {

  @SuppressWarnings("unchecked")
  public static void main(String[] args) throws Exception {
    File path = new File(args[0]);
    Object fileType = Enum.valueOf(
      Class.forName("org.opentripplanner.datastore.api.FileType").asSubclass(Enum.class),
      "EMPIRICAL_DATA"
    );
    Object source = create(
      path.getName().endsWith(".zip")
        ? "org.opentripplanner.datastore.file.ZipFileDataSource"
        : "org.opentripplanner.datastore.file.DirectoryDataSource",
      path,
      fileType
    );
    Object issues = create("org.opentripplanner.graph_builder.issue.service.DefaultDataImportIssueStore");
    Object reader = create(
      "org.opentripplanner.ext.empiricaldelay.internal.csvinput.EmpiricalDelayCsvDataReader",
      issues
    );
    call(reader, "read", source, "F");
    for (Object issue : (Collection<?>) call(issues, "listIssues")) {
      System.out.println("issue\t" + call(issue, "getType") + "\t" + call(issue, "getMessage"));
    }
    Object calendar = call(reader, "calendar");
    if (calendar == null) {
      System.out.println("issue\tNoCalendar\tthe files were not read");
      return;
    }
    LocalDate first = LocalDate.parse(args[1]);
    for (int i = 0; i < Integer.parseInt(args[2]); i++) {
      LocalDate d = first.plusDays(i);
      System.out.println("day\t" + d + "\t" + ((Optional<Object>) call(calendar, "findServiceId", d)).orElse("-"));
    }
    for (Object trip : (Collection<?>) call(reader, "trips")) {
      for (Object serviceId : (Collection<?>) call(trip, "serviceIds")) {
        for (Object delay : (Collection<?>) call(trip, "delaysSortedForServiceId", serviceId)) {
          Object empirical = call(delay, "empiricalDelay");
          System.out.println(
            "row\t" + serviceId + "\t" + call(call(trip, "tripId"), "getId") + "\t" +
            call(call(delay, "stopId"), "getId") + "\t" + call(delay, "sequence") + "\t" +
            call(call(empirical, "p50"), "toSeconds") + "\t" + call(call(empirical, "p90"), "toSeconds")
          );
        }
      }
    }
  }

  /** A new instance of the class named name, by its public constructor of args.length parameters. */
  static Object create(String name, Object... args) throws Exception {
    for (Constructor<?> c : Class.forName(name).getConstructors()) {
      if (c.getParameterCount() == args.length) {
        return c.newInstance(args);
      }
    }
    throw new NoSuchMethodException(name + " with " + args.length + " parameters");
  }

  /** The result of target's public method name of args.length parameters. */
  static Object call(Object target, String name, Object... args) throws Exception {
    for (Method m : target.getClass().getMethods()) {
      if (m.getName().equals(name) && m.getParameterCount() == args.length) {
        m.setAccessible(true);
        return m.invoke(target, args);
      }
    }
    throw new NoSuchMethodException(target.getClass().getName() + "." + name + " with " + args.length + " parameters");
  }
}
