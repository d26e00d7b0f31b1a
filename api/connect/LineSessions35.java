// Spark 3.5's LineSessions, appended to ConnectBackend.java (governance/spark_line.py,
// `connect_sessions_source`): 3.5 keeps Connect sessions in SparkConnectService's
// companion object and has no token interceptor (ConnectBackend.TokenCheck stands in).
class LineSessions {
    private static org.apache.spark.sql.connect.service.SparkConnectService$ service() {
        return org.apache.spark.sql.connect.service.SparkConnectService$.MODULE$;
    }

    /** Nothing to prepare: 3.5 makes each session from the active one. */
    static void prepare(SparkSession base) { }

    static ServerInterceptor authentication(String secret) {
        return new ConnectBackend.TokenCheck(secret);
    }

    static SessionHolder holder(String user, String session) {
        return service().getOrCreateIsolatedSession(user, session);
    }

    /** The session of (user, session) if the backend holds one (none is made), else null. */
    static SessionHolder present(String user, String session) {
        try {
            return service().getIsolatedSession(user, session);
        } catch (Exception e) {
            return null;
        }
    }

    static void release(String user, String session) {
        service().invalidateSession(user, session);
    }

    static SparkConnectPlanner planner(SessionHolder holder) {
        return new SparkConnectPlanner(holder);
    }
}
