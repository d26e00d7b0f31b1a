// Compiled at run time inside the driver's JVM by Janino (as governance/verify/PlanWalker.java is),
// against the Spark Connect server classes on the driver's class path. It serves Spark's
// own Connect service (SparkConnectService) on 127.0.0.1 only, behind the token check of
// the Spark line (`authorization: Bearer <token>`, the gateway's per-process secret: Spark
// 4's own PreSharedKeyAuthenticationInterceptor, on 3.5, which has none, TokenCheck below),
// so only the gateway reaches the backend; and it analyses a (rewritten) Connect relation
// in the very session the backend will run it in, for the plan verifier, and hands it to
// the gateway as a Dataset for a governed DataFrame write; and it releases an expired
// session and cancels an operation's jobs for the gateway. Each backend session's jobs name
// its user's scheduler pool (`pool`), which acts where a deployment runs Spark's FAIR
// scheduler.
// grpc and protobuf are shaded into org.sparkproject.connect by Spark's Connect jar.
// Each backend session's governed settings (variable substitution off, parser and legacy
// settings pinned: governance/verify/GovernedSql.java, the guard handed in at start) are put in
// place before a relation is planned in it, and the relation is parsed and analysed with
// that session active on the calling thread, as the backend's own execution thread has it:
// the verifier sees the plan that runs. A session already secured whose settings changed
// since is refused (its settings are put back).
//
// One source for both lines: api/connect/backend.py prepends the line's Dataset and
// SparkSession imports (governance/spark_line.py, `session_classes`) and appends the line's
// `LineSessions` adapter (`connect_sessions_source`: how the line finds, creates and drops a
// Connect session, builds a planner, and checks the token).
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Collections;
import java.util.Map;
import java.util.WeakHashMap;
import java.util.function.Function;

import org.apache.spark.SparkContext;
import org.apache.spark.connect.proto.Relation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.connect.planner.SparkConnectPlanner;
import org.apache.spark.sql.connect.service.ExecuteJobTag;
import org.apache.spark.sql.connect.service.SessionHolder;
import org.apache.spark.sql.connect.service.SparkConnectService;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.Server;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.ServerInterceptors;
import org.sparkproject.connect.grpc.Status;
import org.sparkproject.connect.grpc.netty.NettyServerBuilder;

public class ConnectBackend {
    /** Every call must carry `authorization: Bearer <secret>`; compared in constant time
     *  (what Spark 4's PreSharedKeyAuthenticationInterceptor checks, for lines without it). */
    public static class TokenCheck implements ServerInterceptor {
        private final byte[] secret;
        private final Metadata.Key key;

        public TokenCheck(String secret) {
            this.secret = ("Bearer " + secret).getBytes(StandardCharsets.UTF_8);
            this.key = Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
        }

        public ServerCall.Listener interceptCall(ServerCall call, Metadata headers,
                                                 ServerCallHandler next) {
            Object got = headers.get(key);
            if (got == null || !MessageDigest.isEqual(
                    secret, ((String) got).getBytes(StandardCharsets.UTF_8))) {
                call.close(Status.UNAUTHENTICATED.withDescription("not the gateway"),
                           new Metadata());
                return new ServerCall.Listener() { };
            }
            return next.startCall(call, headers);
        }
    }

    private Function guard;
    private final Map secured = Collections.synchronizedMap(new WeakHashMap());

    public Server start(SparkSession base, String secret, int maxMessageBytes, Function guard)
            throws Exception {
        this.guard = guard;
        LineSessions.prepare(base);
        NettyServerBuilder b = NettyServerBuilder.forAddress(
            new InetSocketAddress("127.0.0.1", 0));
        b.maxInboundMessageSize(maxMessageBytes);
        b.addService(ServerInterceptors.intercept(new SparkConnectService(false),
            new ServerInterceptor[] { LineSessions.authentication(secret) }));
        return b.build().start();
    }

    /** [drift key or "", Spark's analyzed plan of a relation in the backend session of
     *  (user, session)]. */
    public Object[] analyze(byte[] relation, String user, String session) throws Exception {
        Object[] out = dataset(relation, user, session);
        if (out[1] != null) {
            out[1] = ((Dataset) out[1]).queryExecution().analyzed();
        }
        return out;
    }

    /** [drift key or "", Spark's analyzed plan of a relation in the backend session of
     *  (user, session)], its Dataset kept in that session's DataFrame cache under `id` (the
     *  gateway's unguessable key): the gateway then forwards a CachedRemoteRelation of `id`,
     *  so the backend runs the very plan the verifier accepted and analyses nothing again.
     *  Only the gateway names such a relation (clients' are refused); it forgets `id` when
     *  the execution ends. */
    public Object[] keep(byte[] relation, String user, String session, String id)
            throws Exception {
        Object[] out = dataset(relation, user, session);
        if (out[1] != null) {
            Dataset ds = (Dataset) out[1];
            LineSessions.holder(user, session).cacheDataFrameById(id, ds);
            out[1] = ds.queryExecution().analyzed();
        }
        return out;
    }

    /** Drop the Dataset kept under `id` (a session already released has none). */
    public void forget(String user, String session, String id) {
        SessionHolder holder = LineSessions.present(user, session);
        if (holder != null) {
            holder.removeCachedDataFrame(id);
        }
    }

    /** Whether the backend session of (user, session) keeps a Dataset under `id`. */
    public boolean kept(String user, String session, String id) {
        SessionHolder holder = LineSessions.present(user, session);
        if (holder == null) {
            return false;
        }
        try {
            holder.getDataFrameOrThrow(id);
            return true;
        } catch (Exception e) {
            return false;
        }
    }

    /** Release the backend session of (user, session): Spark's SessionHolder is dropped
     *  (its running operations interrupted); the gateway calls this when it expires a
     *  session. */
    public void release(String user, String session) throws Exception {
        LineSessions.release(user, session);
    }

    /** Whether the backend holds a session for (user, session). */
    public boolean holds(String user, String session) {
        return LineSessions.present(user, session) != null;
    }

    /** Cancel the Spark jobs of one backend operation (they carry Spark Connect's job tag
     *  for user, session and operation), so its cores are freed at once. */
    public void cancel(String user, String session, String operation) {
        SparkContext.getOrCreate().cancelJobsWithTag(
            ExecuteJobTag.apply(user, session, operation));
    }

    /** The backend session of (user, session) with its governed settings in place: "" or
     *  the key of a setting that had changed since the session was last secured. */
    public String secure(String user, String session) throws Exception {
        return secure(user, LineSessions.holder(user, session));
    }

    private String secure(String user, SessionHolder holder) throws Exception {
        SparkSession s = holder.session();
        String changed = (String) guard.apply(s);
        s.conf().set(POOL, pool(user));
        boolean known = secured.put(s, Boolean.TRUE) != null;
        return known ? changed : "";
    }

    /** Spark's setting naming the scheduler pool of a job. As a session setting it reaches
     *  every job of the session's SQL executions (SQLExecution.withSQLConfPropagated puts a
     *  session's `spark.*` settings in the jobs' local properties), on the backend's own
     *  execution threads; clients cannot set it (api/connect/settings.py). */
    static final String POOL = "spark.scheduler.pool";

    /** The scheduler pool of a user's statements (under spark.scheduler.mode=FAIR, which a
     *  deployment opts into, one user's many jobs share one pool's slots, so another
     *  user's short job is not queued behind their tasks; Spark's FIFO, the default, ignores
     *  it). Derived from the verified user name by SHA-256, so a name is never the pool's
     *  name: "lakegate-" and 16 hex digits. */
    static String pool(String user) throws Exception {
        byte[] d = MessageDigest.getInstance("SHA-256").digest(
            user.getBytes(StandardCharsets.UTF_8));
        StringBuilder b = new StringBuilder("lakegate-");
        for (int i = 0; i < 8; i++) {
            b.append(Integer.toHexString((d[i] & 0xff) | 0x100).substring(1));
        }
        return b.toString();
    }

    /** [drift key or "", a relation as a Dataset of the backend session of (user, session)]:
     *  a governed DataFrame write analyses, verifies and writes this one Dataset. */
    public Object[] dataset(byte[] relation, String user, String session) throws Exception {
        Relation rel = Relation.parseFrom(relation);
        SessionHolder holder = LineSessions.holder(user, session);
        String changed = secure(user, holder);
        if (!changed.isEmpty()) {
            return new Object[] {changed, null};
        }
        scala.Option previous = SparkSession.getActiveSession();
        SparkSession.setActiveSession(holder.session());
        try {
            LogicalPlan plan = LineSessions.planner(holder).transformRelation(rel);
            return new Object[] {"", Dataset.ofRows(holder.session(), plan)};
        } finally {
            if (previous.isDefined()) {
                SparkSession.setActiveSession((SparkSession) previous.get());
            } else {
                SparkSession.clearActiveSession();
            }
        }
    }
}
