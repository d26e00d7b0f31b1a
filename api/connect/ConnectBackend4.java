// Compiled at run time inside the driver's JVM by Janino (as governance/PlanWalker.java is),
// against the Spark Connect server classes on the driver's class path (spark.jars). It
// serves Spark Connect on 127.0.0.1 only and refuses every call that lacks the gateway's
// per-process secret header, so only the gateway reaches the backend; and it analyses a
// (rewritten) Connect relation in the very session the backend will run it in, for the
// plan verifier, and hands it to the gateway as a Dataset for a governed DataFrame write.
// grpc and protobuf are shaded into org.sparkproject.connect by that jar.
// The Spark 4 line's copy of ConnectBackend.java (governance/spark_line.py chooses): Spark 4
// keys an isolated session by a previous session id too, its planner takes an optional
// execution, and a session's Datasets are the classic (in-JVM) ones.
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;

import org.apache.spark.connect.proto.Relation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.connect.planner.SparkConnectPlanner;
import org.apache.spark.sql.connect.service.SessionHolder;
import org.apache.spark.sql.connect.service.SparkConnectService;
import org.apache.spark.sql.classic.Dataset;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.Server;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.ServerInterceptors;
import org.sparkproject.connect.grpc.Status;
import org.sparkproject.connect.grpc.netty.NettyServerBuilder;

public class ConnectBackend {
    public static final String HEADER = "x-lakegate-backend";

    /** Every call must carry the secret; compared in constant time. */
    public static class SecretCheck implements ServerInterceptor {
        private final byte[] secret;
        private final Metadata.Key key;

        public SecretCheck(String secret) {
            this.secret = secret.getBytes(StandardCharsets.UTF_8);
            this.key = Metadata.Key.of(HEADER, Metadata.ASCII_STRING_MARSHALLER);
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

    public Server start(String secret, int maxMessageBytes) throws Exception {
        NettyServerBuilder b = NettyServerBuilder.forAddress(
            new InetSocketAddress("127.0.0.1", 0));
        b.maxInboundMessageSize(maxMessageBytes);
        b.addService(ServerInterceptors.intercept(new SparkConnectService(false),
            new ServerInterceptor[] { new SecretCheck(secret) }));
        return b.build().start();
    }

    /** Spark's analyzed plan of a relation, in the backend session of (user, session). */
    public LogicalPlan analyze(byte[] relation, String user, String session) throws Exception {
        return dataset(relation, user, session).queryExecution().analyzed();
    }

    /** A relation as a Dataset of the backend session of (user, session): a governed
     *  DataFrame write analyses, verifies and writes this one Dataset. */
    public Dataset dataset(byte[] relation, String user, String session) throws Exception {
        Relation rel = Relation.parseFrom(relation);
        SessionHolder holder = SparkConnectService.getOrCreateIsolatedSession(
            user, session, scala.Option.empty());
        LogicalPlan plan = new SparkConnectPlanner(holder, scala.Option.empty())
            .transformRelation(rel);
        return Dataset.ofRows(holder.session(), plan);
    }
}
