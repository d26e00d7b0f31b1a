// Compiled at run time inside the driver's JVM by Janino (which Spark ships), so the plan
// verifier learns a whole analyzed plan's shape in one py4j call instead of several calls
// per node. It only describes the plan; every decision is made in governance/verify.py.
//
// apply(plan, spec) returns Object[]: [0] a description (deflated, Base64), one line per node:
//   id TAB parent TAB kind TAB inTarget TAB leaf TAB paths(US-separated) TAB columns(US)
//   TAB holder
// parent is -1 where a fresh ancestry starts (the root, a subquery, a plan held in a field);
// holder is the id of the node whose expressions hold a subquery's plan (-1 otherwise);
// leaf is 1 when the node has no children besides its plan fields; paths are the relation's
// root paths (Delta V1/V2 and file relations), columns a Project's output names; both
// escaped (\\ \t \n \r, and \s for US) so that no name can forge a field or a line.
// [1 + id] is the node itself, for the few nodes Python must ask more of (`same`).
// spec: "Kind:field:isTarget,field:isTarget;Kind:..." (the fields that hold plans).
// If the plan has more than `limit` nodes, [0] is the string "TOO_LARGE".

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

public class PlanWalker implements java.util.function.BiFunction {

    private static final char US = (char) 31;

    /** Names may hold any character: escape the separators so no name forges a line. */
    private static String esc(String s) {
        StringBuilder b = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '\\') {
                b.append("\\\\");
            } else if (c == '\t') {
                b.append("\\t");
            } else if (c == '\n') {
                b.append("\\n");
            } else if (c == '\r') {
                b.append("\\r");
            } else if (c == US) {
                b.append("\\s");
            } else {
                b.append(c);
            }
        }
        return b.toString();
    }

    public Object apply(Object plan, Object specAndLimit) {
        String[] parts = ((String) specAndLimit).split("\n", 2);
        int limit = Integer.parseInt(parts[0]);
        Map fields = parseSpec(parts.length > 1 ? parts[1] : "");
        StringBuilder out = new StringBuilder();
        List nodes = new ArrayList();
        List stack = new ArrayList();
        stack.add(new Object[] {plan, Integer.valueOf(-1), Boolean.FALSE, Integer.valueOf(-1)});
        while (!stack.isEmpty()) {
            Object[] item = (Object[]) stack.remove(stack.size() - 1);
            Object node = item[0];
            int parent = ((Integer) item[1]).intValue();
            boolean inTarget = ((Boolean) item[2]).booleanValue();
            int holder = ((Integer) item[3]).intValue();
            int id = nodes.size();
            if (id >= limit) {
                return new Object[] {"TOO_LARGE"};
            }
            nodes.add(node);
            String kind = node.getClass().getSimpleName();
            if (kind.endsWith("$")) {
                kind = kind.substring(0, kind.length() - 1);
            }
            scala.collection.Seq subs = (scala.collection.Seq) call(node, "subqueries");
            for (int i = 0; i < subs.size(); i++) {
                stack.add(new Object[] {subs.apply(i), Integer.valueOf(-1), Boolean.FALSE,
                    Integer.valueOf(id)});
            }
            List held = new ArrayList();
            String[][] spec = (String[][]) fields.get(kind);
            if (spec != null) {
                for (int i = 0; i < spec.length; i++) {
                    Object sub = call(node, spec[i][0]);
                    held.add(sub);
                    stack.add(new Object[] {sub, Integer.valueOf(-1),
                        Boolean.valueOf("1".equals(spec[i][1])), Integer.valueOf(-1)});
                }
            }
            scala.collection.Seq children = (scala.collection.Seq) call(node, "children");
            int kept = 0;
            for (int i = 0; i < children.size(); i++) {
                Object c = children.apply(i);
                boolean isField = false;
                for (int j = 0; j < held.size(); j++) {
                    if (c.equals(held.get(j))) {
                        isField = true;
                    }
                }
                if (!isField) {
                    kept++;
                    stack.add(new Object[] {c, Integer.valueOf(id), Boolean.valueOf(inTarget),
                        Integer.valueOf(-1)});
                }
            }
            out.append(id).append('\t').append(parent).append('\t').append(kind).append('\t')
                .append(inTarget ? '1' : '0').append('\t').append(kept == 0 ? '1' : '0')
                .append('\t').append(kept == 0 ? paths(node, kind) : "").append('\t')
                .append("Project".equals(kind) ? columns(node) : "").append('\t')
                .append(holder).append('\n');
        }
        Object[] result = new Object[nodes.size() + 1];
        result[0] = pack(out.toString());
        for (int i = 0; i < nodes.size(); i++) {
            result[i + 1] = nodes.get(i);
        }
        return result;
    }

    /**
     * A whole governed view's analyzed plan cut to the projection a narrowed view reads:
     * the expressions at `picks` (comma-separated positions, in order) of its root Project,
     * over the same child. Null when the plan is not a Project or a position is out of range.
     */
    public Object narrow(Object view, String picks) {
        if (!(view instanceof org.apache.spark.sql.catalyst.plans.logical.Project)) {
            return null;
        }
        org.apache.spark.sql.catalyst.plans.logical.Project whole =
            (org.apache.spark.sql.catalyst.plans.logical.Project) view;
        scala.collection.Seq list = whole.projectList();
        String[] at = picks.split(",");
        List kept = new ArrayList();
        for (int i = 0; i < at.length; i++) {
            int p = Integer.parseInt(at[i]);
            if (p < 0 || p >= list.size()) {
                return null;
            }
            kept.add(list.apply(p));
        }
        return new org.apache.spark.sql.catalyst.plans.logical.Project(
            scala.collection.JavaConverters.asScalaBuffer(kept).toSeq(), whole.child());
    }

    /**
     * Whether node `id` of a described plan (`described` is apply's answer) has the same
     * result as `view`, a governed view's analyzed plan, cut to `picks` first unless it is
     * empty (see narrow): one py4j call per comparison instead of three (fetch the node,
     * narrow, sameResult). Spark's own sameResult decides.
     */
    public boolean same(Object[] described, int id, Object view, String picks) {
        Object v = picks.length() == 0 ? view : narrow(view, picks);
        if (v == null) {
            return false;
        }
        org.apache.spark.sql.catalyst.plans.logical.LogicalPlan root =
            (org.apache.spark.sql.catalyst.plans.logical.LogicalPlan) described[id + 1];
        return root.sameResult((org.apache.spark.sql.catalyst.plans.logical.LogicalPlan) v);
    }

    /**
     * The description deflated and in Base64: py4j writes an answer through an 8 KiB buffer,
     * and one over it leaves in two TCP writes, which Nagle's algorithm and the reader's
     * delayed ACK hold back by about 40 ms. Packed, a plan of hundreds of nodes fits one.
     */
    private static String pack(String text) {
        byte[] raw = text.getBytes(java.nio.charset.StandardCharsets.UTF_8);
        java.util.zip.Deflater deflater = new java.util.zip.Deflater(1);
        deflater.setInput(raw);
        deflater.finish();
        java.io.ByteArrayOutputStream packed = new java.io.ByteArrayOutputStream(raw.length / 4 + 64);
        byte[] buf = new byte[8192];
        while (!deflater.finished()) {
            int n = deflater.deflate(buf);
            packed.write(buf, 0, n);
        }
        deflater.end();
        return java.util.Base64.getEncoder().encodeToString(packed.toByteArray());
    }

    private static Map parseSpec(String spec) {
        Map fields = new HashMap();
        if (spec.length() == 0) {
            return fields;
        }
        String[] kinds = spec.split(";");
        for (int i = 0; i < kinds.length; i++) {
            String[] kv = kinds[i].split(":", 2);
            String[] entries = kv[1].split(",");
            String[][] parsed = new String[entries.length][];
            for (int j = 0; j < entries.length; j++) {
                parsed[j] = entries[j].split(":");
            }
            fields.put(kv[0], parsed);
        }
        return fields;
    }

    private static Object call(Object target, String method) {
        try {
            return target.getClass().getMethod(method, new Class[0]).invoke(target, new Object[0]);
        } catch (Exception e) {
            throw new RuntimeException("plan walker: " + method + " on "
                + target.getClass().getName() + ": " + e);
        }
    }

    private static String uriPath(Object hadoopPath) {
        Object uri = call(hadoopPath, "toUri");
        return String.valueOf(call(uri, "getPath"));
    }

    /** Root paths of a file-based or Delta relation; "" when it has none (as in Python). */
    private static String paths(Object node, String kind) {
        try {
            if ("DataSourceV2Relation".equals(kind)) {
                return esc(uriPath(call(call(node, "table"), "path")));
            }
            if (!"LogicalRelation".equals(kind)) {
                return "";
            }
            Object location = call(call(node, "relation"), "location");
            scala.collection.Seq roots = (scala.collection.Seq) call(location, "rootPaths");
            StringBuilder b = new StringBuilder();
            for (int i = 0; i < roots.size(); i++) {
                if (i > 0) {
                    b.append(US);
                }
                b.append(esc(uriPath(roots.apply(i))));
            }
            return b.toString();
        } catch (RuntimeException e) {
            return "";
        }
    }

    private static String columns(Object project) {
        scala.collection.Seq list = (scala.collection.Seq) call(project, "projectList");
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < list.size(); i++) {
            if (i > 0) {
                b.append(US);
            }
            b.append(esc(String.valueOf(call(list.apply(i), "name"))));
        }
        return b.toString();
    }
}
