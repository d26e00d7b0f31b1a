// Compiled at run time inside the driver's JVM by Janino (as PlanWalker.java is). Spark's
// parser rewrites a statement's text before it parses it (`${...}` variable substitution,
// on by default) and reads parser and legacy settings that change what a text means; a
// statement Lakegate checked must be the statement Spark runs. So every governed statement
// is parsed here, in one JVM call that also checks the session's settings:
//
// - drift: the settings that change how text is parsed or analysed (the families in
//   `families`: spark.sql.variable., parser., legacy., ansi.) must be exactly the pinned ones
//   (Lakegate's GOVERNED_CONF); any other value means something in the process changed
//   them: the setting is put back and the statement refused (its key is returned);
// - parse: under a private copy of the session's settings with the pins forced, which no
//   other thread can change between the check and the parse;
// - a query comes back as the Dataset whose analyzed plan is verified and then run; a
//   command as its analyzed plan (nothing run), which `run` then executes as it is.

// Dataset and SparkSession are imported by governance/verify/guard.py from the Spark line's adapter
// (governance/spark_line.py: Spark 4 keeps `sessionState` and `ofRows` in `classic`).
import java.util.HashMap;
import java.util.Map;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.internal.SQLConf;

public class GovernedSql implements java.util.function.Function {
    private final Map pins = new HashMap();
    private String[] families = new String[0];

    /** The governed settings (key, value, key, value, ...) and the families they close. */
    public synchronized void pin(String[] keyValues, String[] familyPrefixes) {
        pins.clear();
        for (int i = 0; i + 1 < keyValues.length; i += 2) {
            pins.put(keyValues[i], keyValues[i + 1]);
        }
        families = familyPrefixes;
    }

    private boolean inFamily(String key) {
        for (int i = 0; i < families.length; i++) {
            if (key.startsWith(families[i])) {
                return true;
            }
        }
        return false;
    }

    /** "" when the session's governed settings are the pinned ones; else the first key that
     *  was not, after putting every governed setting back (pins set, others unset). */
    public String drift(SQLConf conf) {
        String found = "";
        java.util.Iterator it = pins.entrySet().iterator();
        while (it.hasNext()) {
            Map.Entry e = (Map.Entry) it.next();
            String key = (String) e.getKey();
            if (!conf.contains(key) || !e.getValue().equals(conf.getConfString(key))) {
                conf.setConfString(key, (String) e.getValue());
                if (found.isEmpty()) {
                    found = key;
                }
            }
        }
        scala.collection.Iterator keys = conf.getAllConfs().keysIterator();
        while (keys.hasNext()) {
            String key = (String) keys.next();
            if (inFamily(key) && !pins.containsKey(key)) {
                conf.unsetConf(key);
                if (found.isEmpty()) {
                    found = key;
                }
            }
        }
        return found;
    }

    /** Put the session's governed settings in place; the keys that were not (comma list). */
    public String secure(SparkSession s) {
        SQLConf conf = s.sessionState().conf();
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < 64; i++) {  // one key reported per pass
            String key = drift(conf);
            if (key.isEmpty()) {
                break;
            }
            out.append(out.length() > 0 ? "," : "").append(key);
        }
        return out.toString();
    }

    /** The Connect backend's view of `secure` (a JDK interface across class loaders). */
    public Object apply(Object session) {
        return secure((SparkSession) session);
    }

    /** `sql` parsed with the pinned settings forced, in a copy of the session's settings. */
    public LogicalPlan parse(final SparkSession s, final String sql) throws Exception {
        SQLConf copy = s.sessionState().conf().clone();
        java.util.Iterator it = pins.entrySet().iterator();
        while (it.hasNext()) {
            Map.Entry e = (Map.Entry) it.next();
            copy.setConfString((String) e.getKey(), (String) e.getValue());
        }
        // Spark's ParseException is a checked exception to Java: carried out as a value and
        // thrown as itself, so the caller sees Spark's own error (class and position)
        Object out = SQLConf.withExistingConf(copy, new scala.runtime.AbstractFunction0() {
            public Object apply() {
                try {
                    return s.sessionState().sqlParser().parsePlan(sql);
                } catch (Exception e) {
                    return e;
                }
            }
        });
        if (out instanceof Exception) {
            throw (Exception) out;
        }
        return (LogicalPlan) out;
    }

    /** What `drift` answers for session variables (a key no setting can have). */
    public static final String VARIABLES = " session variables";

    /** "" when the session holds no SQL session variables; else VARIABLES, after dropping
     *  them all. Spark 4's variables live in the shared session and a governed statement
     *  could read one (`SELECT session.v`); Lakegate refuses DECLARE, so any found were
     *  declared outside it. Spark 3.5 has none (no tempVariableManager): "". */
    public String variables(SparkSession s) throws Exception {
        Object catalogs = s.sessionState().catalogManager();
        java.lang.reflect.Method getter;
        try {
            getter = catalogs.getClass().getMethod("tempVariableManager", new Class[0]);
        } catch (NoSuchMethodException e) {
            return "";
        }
        Object manager = getter.invoke(catalogs, new Object[0]);
        Object empty = manager.getClass().getMethod("isEmpty", new Class[0])
            .invoke(manager, new Object[0]);
        if (((Boolean) empty).booleanValue()) {
            return "";
        }
        manager.getClass().getMethod("clear", new Class[0]).invoke(manager, new Object[0]);
        return VARIABLES;
    }

    /** The first governed setting that drifted (put back), else VARIABLES if the session
     *  held session variables (dropped), else "". */
    private String governed(SparkSession s) throws Exception {
        String key = drift(s.sessionState().conf());
        return key.isEmpty() ? variables(s) : key;
    }

    /** [drift key or "", the query's Dataset (analysed, nothing run) or null]. */
    public Object[] query(SparkSession s, String sql) throws Exception {
        String key = governed(s);
        if (!key.isEmpty()) {
            return new Object[] {key, null};
        }
        return new Object[] {"", Dataset.ofRows(s, parse(s, sql))};
    }

    /** [drift key or "", the command's analyzed plan (nothing run) or null]; analysed with
     *  `s` active on this thread (Delta resolves `delta.`path`` through it). */
    public Object[] command(SparkSession s, String sql) throws Exception {
        String key = governed(s);
        if (!key.isEmpty()) {
            return new Object[] {key, null};
        }
        SparkSession.setActiveSession(s);
        LogicalPlan parsed = parse(s, sql);
        // checkAnalysis marks the plan analyzed, so `run` executes it as it is
        LogicalPlan analyzed = s.sessionState().analyzer().execute(parsed);
        s.sessionState().analyzer().checkAnalysis(analyzed);
        return new Object[] {"", analyzed};
    }

    /** Run an analyzed plan as it is (a command runs now); Spark does not analyse it again. */
    public Dataset run(SparkSession s, LogicalPlan analyzed) {
        return Dataset.ofRows(s, analyzed);
    }
}
