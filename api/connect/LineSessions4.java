// Spark 4's LineSessions, appended to ConnectBackend.java (governance/spark_line.py,
// `connect_sessions_source`): Spark 4 keeps Connect sessions in a session manager (keyed
// by SessionKey, made from a base session the server is handed), its planner takes an
// optional execution, and it ships its own pre-shared token check.
class LineSessions {
    private static org.apache.spark.sql.connect.service.SparkConnectSessionManager manager() {
        return org.apache.spark.sql.connect.service.SparkConnectService$.MODULE$
            .sessionManager();
    }

    private static org.apache.spark.sql.connect.service.SessionKey key(
            String user, String session) {
        return org.apache.spark.sql.connect.service.SessionKey.apply(user, session);
    }

    /** The session every Connect session is made from (what Spark's own start does). */
    static void prepare(final SparkSession base) {
        manager().initializeBaseSession(new scala.runtime.AbstractFunction0() {
            public Object apply() {
                return base;
            }
        });
    }

    static ServerInterceptor authentication(String secret) {
        return new org.apache.spark.sql.connect.service.PreSharedKeyAuthenticationInterceptor(
            secret);
    }

    static SessionHolder holder(String user, String session) {
        return manager().getOrCreateIsolatedSession(key(user, session), scala.Option.empty());
    }

    /** The session of (user, session) if the backend holds one (none is made), else null. */
    static SessionHolder present(String user, String session) {
        scala.Option found = manager().getIsolatedSessionIfPresent(key(user, session));
        return found.isDefined() ? (SessionHolder) found.get() : null;
    }

    /** Closed for reconnection as 3.5 drops it: the same id later makes a fresh session
     *  (the gateway decides whether that id is still served). */
    static void release(String user, String session) {
        manager().closeSession(key(user, session), true);
    }

    static SparkConnectPlanner planner(SessionHolder holder) {
        return new SparkConnectPlanner(holder, scala.Option.empty());
    }
}
