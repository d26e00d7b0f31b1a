// Spark 3.5's LineSessions, appended to ConnectBackend.java (governance/spark_line.py,
// `connect_sessions_source`): 3.5 keeps Connect sessions in SparkConnectService's
// companion object and has no token interceptor (ConnectBackend.TokenCheck stands in).
class LineSessions {
    private static org.apache.spark.sql.connect.service.SparkConnectService$ service() {
        return org.apache.spark.sql.connect.service.SparkConnectService$.MODULE$;
    }

    private static boolean exact;

    /** 3.5 keeps its sessions in a Guava cache of maximumSize(100) split into four
     *  segments, and a segment evicts past its own quarter: at 96 open sessions (what
     *  connect.max_sessions allows) it dropped 8 live ones, their temp views and running
     *  operations with them. The same cache rebuilt with one segment evicts only past 100,
     *  which the gateway's own cap stays under. Once per JVM, sessions already held kept. */
    static synchronized void prepare(SparkSession base) {
        if (exact) return;
        try {
            Object svc = service();
            Class<?> cls = svc.getClass();
            java.lang.reflect.Method size = cls.getDeclaredMethod("CACHE_SIZE", new Class[0]);
            java.lang.reflect.Method ttl =
                cls.getDeclaredMethod("CACHE_TIMEOUT_SECONDS", new Class[0]);
            java.lang.reflect.Method builder =
                cls.getDeclaredMethod("cacheBuilder", new Class[] {int.class, int.class});
            java.lang.reflect.Field field = cls.getDeclaredField("userSessionMapping");
            size.setAccessible(true);
            ttl.setAccessible(true);
            builder.setAccessible(true);
            field.setAccessible(true);
            org.sparkproject.connect.guava.cache.CacheBuilder b =
                (org.sparkproject.connect.guava.cache.CacheBuilder) builder.invoke(svc,
                    new Object[] {size.invoke(svc, new Object[0]), ttl.invoke(svc, new Object[0])});
            org.sparkproject.connect.guava.cache.Cache one = b.concurrencyLevel(1).build();
            org.sparkproject.connect.guava.cache.Cache old =
                (org.sparkproject.connect.guava.cache.Cache) field.get(svc);
            one.putAll(old.asMap());
            field.set(svc, one);
            exact = true;
        } catch (Exception e) {
            throw new IllegalStateException(
                "Spark 3.5's Connect session cache could not be made exact: " + e, e);
        }
    }

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
