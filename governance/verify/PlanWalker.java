// Compiled at run time inside the driver's JVM by Janino (which Spark ships), so the plan
// verifier learns a whole analyzed plan's shape in one py4j call instead of several calls
// per node. It only describes the plan; every decision is made in governance/verify/plan.py.
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
    static String esc(String s) {
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
     * The columns a plan reads of each node in `roots` (comma-separated ids of a described
     * plan, the governed views' projections): a backward pass in the manner of Spark's
     * column pruning, from what each plan root (`fresh`: the ids of the described plan's
     * root and of the plans held in fields) hands back (all of its output) down to every
     * node, through what each node's expressions use. Answers one line per root, in order:
     * the positions of its projection's outputs that some node above uses, comma-separated.
     * An operator it does not know needs all of its children's output, so the answer may
     * name a column that is not read, never leave out one that is.
     */
    public String live(Object[] described, String roots, String fresh) {
        Liveness pass = new Liveness();
        String[] starts = fresh.split(",");
        for (int i = 0; i < starts.length; i++) {
            if (starts[i].length() > 0) {
                org.apache.spark.sql.catalyst.plans.logical.LogicalPlan p =
                    (org.apache.spark.sql.catalyst.plans.logical.LogicalPlan)
                        described[Integer.parseInt(starts[i]) + 1];
                pass.visit(p, Liveness.ids(p.output()), 0);
            }
        }
        StringBuilder out = new StringBuilder();
        String[] at = roots.split(",");
        for (int i = 0; i < at.length; i++) {
            if (at[i].length() == 0) {
                continue;
            }
            org.apache.spark.sql.catalyst.plans.logical.LogicalPlan root =
                (org.apache.spark.sql.catalyst.plans.logical.LogicalPlan)
                    described[Integer.parseInt(at[i]) + 1];
            java.util.Set needed = pass.neededOf(root);
            scala.collection.Iterator it = root.output().iterator();
            int pos = 0;
            boolean first = true;
            while (it.hasNext()) {
                Object attr = it.next();
                if (needed.contains(((org.apache.spark.sql.catalyst.expressions.Attribute) attr)
                        .exprId())) {
                    if (!first) {
                        out.append(',');
                    }
                    out.append(pos);
                    first = false;
                }
                pos++;
            }
            out.append('\n');
        }
        return out.toString();
    }

    /**
     * Where each column a write's query makes comes from (governance/planning/lineage.py):
     * `field` names the plan field holding the query ("" for the plan itself). One line per
     * output attribute, in order: its name and the names it had below where it is only a
     * renamed (or cast) column (US-separated), then TAB and one leaf per source column it is
     * computed from (the relation's root paths, US-separated, then US and the column's
     * name), each part escaped. When a node or expression cannot be traced: "!kind", then
     * one line per output name (the caller gives every column every tag).
     */
    public String lineage(Object plan, String field) {
        org.apache.spark.sql.catalyst.plans.logical.LogicalPlan query =
            (org.apache.spark.sql.catalyst.plans.logical.LogicalPlan)
                (field.length() == 0 ? plan : call(plan, field));
        Lineage pass = new Lineage();
        try {
            pass.visit(query, 0);
            StringBuilder out = new StringBuilder();
            scala.collection.Iterator it = query.output().iterator();
            while (it.hasNext()) {
                org.apache.spark.sql.catalyst.expressions.Attribute a =
                    (org.apache.spark.sql.catalyst.expressions.Attribute) it.next();
                java.util.List names = pass.names(a);
                for (int i = 0; i < names.size(); i++) {
                    if (i > 0) {
                        out.append(US);
                    }
                    out.append(esc((String) names.get(i)));
                }
                java.util.Iterator leaves = pass.of(a).iterator();
                while (leaves.hasNext()) {
                    out.append('\t').append((String) leaves.next());
                }
                out.append('\n');
            }
            return out.toString();
        } catch (Lineage.Untraced e) {
            StringBuilder out = new StringBuilder("!").append(esc(e.getMessage())).append('\n');
            scala.collection.Iterator it = query.output().iterator();
            while (it.hasNext()) {
                out.append(esc(((org.apache.spark.sql.catalyst.expressions.Attribute) it.next())
                    .name())).append('\n');
            }
            return out.toString();
        }
    }

    /** A relation's root paths (Delta V1/V2 and file relations), unescaped; null if none. */
    static List rootPaths(Object node, String kind) {
        List out = new ArrayList();
        try {
            if ("DataSourceV2Relation".equals(kind)) {
                out.add(uriPath(call(call(node, "table"), "path")));
                return out;
            }
            if (!"LogicalRelation".equals(kind)) {
                return null;
            }
            Object location = call(call(node, "relation"), "location");
            scala.collection.Seq roots = (scala.collection.Seq) call(location, "rootPaths");
            for (int i = 0; i < roots.size(); i++) {
                out.add(uriPath(roots.apply(i)));
            }
            return out.isEmpty() ? null : out;
        } catch (RuntimeException e) {
            return null;
        }
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

    static Object call(Object target, String method) {
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

/**
 * PlanWalker.live's backward pass: for each plan node, the output attributes (by expression
 * id) that the nodes above it use. Projections and aggregates pass on only what their
 * used outputs are computed from (and an aggregate's grouping), unions and CTE references
 * map by position, operators that compare whole rows (DISTINCT, INTERSECT, EXCEPT) use all
 * of their input, operators that keep their input's columns use what is used of them plus
 * what their own expressions read, and any other operator uses all of its input. A subquery
 * hands back all of its output (an EXISTS none: only its conditions read columns).
 */
class Liveness {

    private static final java.util.Set KEEPS = new java.util.HashSet(java.util.Arrays.asList(
        new String[] {"SubqueryAlias", "View", "Filter", "Sort", "GlobalLimit", "LocalLimit",
            "Offset", "Tail", "Sample", "Repartition", "RepartitionByExpression",
            "RebalancePartitions", "Deduplicate", "DeduplicateWithinWatermark", "Join",
            "LateralJoin", "Generate", "Window", "Expand", "CollectMetrics", "CTERelationDef",
            "ResolvedHint", "WindowGroupLimit"}));
    private static final int MAX_DEPTH = 20000;

    private final java.util.IdentityHashMap needed = new java.util.IdentityHashMap();
    private final java.util.Map ctePositions = new java.util.HashMap();

    static java.util.Set ids(Object attributes) {
        java.util.Set out = new java.util.HashSet();
        scala.collection.Iterator it = ((scala.collection.Iterable) attributes).iterator();
        while (it.hasNext()) {
            out.add(((org.apache.spark.sql.catalyst.expressions.Attribute) it.next()).exprId());
        }
        return out;
    }

    private static java.util.Set references(Object expression) {
        return ids(((org.apache.spark.sql.catalyst.expressions.Expression) expression)
            .references());
    }

    private static Object exprId(Object named) {
        return ((org.apache.spark.sql.catalyst.expressions.NamedExpression) named).toAttribute()
            .exprId();
    }

    private static String kind(Object node) {
        String kind = node.getClass().getSimpleName();
        return kind.endsWith("$") ? kind.substring(0, kind.length() - 1) : kind;
    }

    java.util.Set neededOf(Object node) {
        java.util.Set s = (java.util.Set) needed.get(node);
        return s == null ? new java.util.HashSet() : s;
    }

    void visit(org.apache.spark.sql.catalyst.plans.logical.LogicalPlan node, java.util.Set req,
            int depth) {
        if (depth > MAX_DEPTH) {
            throw new IllegalStateException("plan too deep for the column pass");
        }
        java.util.Set have = (java.util.Set) needed.get(node);
        if (have != null && have.containsAll(req)) {
            return;
        }
        java.util.Set all = new java.util.HashSet(req);
        if (have != null) {
            all.addAll(have);
        }
        needed.put(node, all);
        subqueries(node, depth);
        String kind = kind(node);
        scala.collection.Iterator children = node.children().iterator();
        if ("Project".equals(kind)) {
            org.apache.spark.sql.catalyst.plans.logical.Project p =
                (org.apache.spark.sql.catalyst.plans.logical.Project) node;
            java.util.Set use = new java.util.HashSet();
            scala.collection.Iterator it = p.projectList().iterator();
            while (it.hasNext()) {
                Object e = it.next();
                if (all.contains(exprId(e))) {
                    use.addAll(references(e));
                }
            }
            visit(p.child(), use, depth + 1);
        } else if ("Aggregate".equals(kind)) {
            org.apache.spark.sql.catalyst.plans.logical.Aggregate a =
                (org.apache.spark.sql.catalyst.plans.logical.Aggregate) node;
            java.util.Set use = new java.util.HashSet();
            scala.collection.Iterator it = a.groupingExpressions().iterator();
            while (it.hasNext()) {
                use.addAll(references(it.next()));
            }
            it = a.aggregateExpressions().iterator();
            while (it.hasNext()) {
                Object e = it.next();
                if (all.contains(exprId(e))) {
                    use.addAll(references(e));
                }
            }
            visit(a.child(), use, depth + 1);
        } else if ("Union".equals(kind)) {
            java.util.List positions = usedPositions(node.output(), all);
            while (children.hasNext()) {
                org.apache.spark.sql.catalyst.plans.logical.LogicalPlan c =
                    (org.apache.spark.sql.catalyst.plans.logical.LogicalPlan) children.next();
                visit(c, atPositions(c.output(), positions), depth + 1);
            }
        } else if ("WithCTE".equals(kind)) {
            org.apache.spark.sql.catalyst.plans.logical.WithCTE w =
                (org.apache.spark.sql.catalyst.plans.logical.WithCTE) node;
            visit(w.plan(), all, depth + 1);
            scala.collection.Seq defs = w.cteDefs();
            for (int i = defs.size() - 1; i >= 0; i--) {  // a definition may use earlier ones
                org.apache.spark.sql.catalyst.plans.logical.CTERelationDef d =
                    (org.apache.spark.sql.catalyst.plans.logical.CTERelationDef) defs.apply(i);
                java.util.List positions = (java.util.List) ctePositions.get(
                    Long.valueOf(d.id()));
                visit(d, positions == null ? new java.util.HashSet()
                    : atPositions(d.output(), positions), depth + 1);
            }
        } else if ("CTERelationRef".equals(kind)) {
            org.apache.spark.sql.catalyst.plans.logical.CTERelationRef r =
                (org.apache.spark.sql.catalyst.plans.logical.CTERelationRef) node;
            Long key = Long.valueOf(r.cteId());
            java.util.List known = (java.util.List) ctePositions.get(key);
            java.util.List positions = usedPositions(r.output(), all);
            if (known != null) {
                for (int i = 0; i < known.size(); i++) {
                    if (!positions.contains(known.get(i))) {
                        positions.add(known.get(i));
                    }
                }
            }
            ctePositions.put(key, positions);
        } else if (KEEPS.contains(kind)) {
            java.util.Set use = new java.util.HashSet(all);
            use.addAll(ids(node.references()));
            while (children.hasNext()) {
                org.apache.spark.sql.catalyst.plans.logical.LogicalPlan c =
                    (org.apache.spark.sql.catalyst.plans.logical.LogicalPlan) children.next();
                java.util.Set mine = ids(c.output());
                mine.retainAll(use);
                visit(c, mine, depth + 1);
            }
        } else {  // DISTINCT, INTERSECT, EXCEPT, and any operator not known: all of the input
            while (children.hasNext()) {
                org.apache.spark.sql.catalyst.plans.logical.LogicalPlan c =
                    (org.apache.spark.sql.catalyst.plans.logical.LogicalPlan) children.next();
                visit(c, ids(c.output()), depth + 1);
            }
        }
    }

    /** Every subquery in the node's expressions, handing back all of its output. */
    private void subqueries(org.apache.spark.sql.catalyst.plans.logical.LogicalPlan node,
            int depth) {
        java.util.List stack = new java.util.ArrayList();
        scala.collection.Iterator it = node.expressions().iterator();
        while (it.hasNext()) {
            stack.add(it.next());
        }
        while (!stack.isEmpty()) {
            Object e = stack.remove(stack.size() - 1);
            if (e instanceof org.apache.spark.sql.catalyst.expressions.SubqueryExpression) {
                org.apache.spark.sql.catalyst.plans.logical.LogicalPlan p =
                    (org.apache.spark.sql.catalyst.plans.logical.LogicalPlan)
                        ((org.apache.spark.sql.catalyst.expressions.SubqueryExpression) e).plan();
                visit(p, "Exists".equals(kind(e)) ? new java.util.HashSet() : ids(p.output()),
                    depth + 1);
            }
            scala.collection.Iterator kids =
                ((org.apache.spark.sql.catalyst.expressions.Expression) e).children().iterator();
            while (kids.hasNext()) {
                stack.add(kids.next());
            }
        }
    }

    private static java.util.List usedPositions(Object output, java.util.Set used) {
        java.util.List out = new java.util.ArrayList();
        scala.collection.Iterator it = ((scala.collection.Iterable) output).iterator();
        int i = 0;
        while (it.hasNext()) {
            Object a = it.next();
            if (used.contains(((org.apache.spark.sql.catalyst.expressions.Attribute) a).exprId())) {
                out.add(Integer.valueOf(i));
            }
            i++;
        }
        return out;
    }

    private static java.util.Set atPositions(Object output, java.util.List positions) {
        java.util.Set out = new java.util.HashSet();
        scala.collection.Iterator it = ((scala.collection.Iterable) output).iterator();
        int i = 0;
        while (it.hasNext()) {
            Object a = it.next();
            if (positions.contains(Integer.valueOf(i))) {
                out.add(((org.apache.spark.sql.catalyst.expressions.Attribute) a).exprId());
            }
            i++;
        }
        return out;
    }
}

/**
 * PlanWalker.lineage's pass: for every attribute a plan defines (by expression id), the
 * source columns (leaves: relation and column) its value is computed from, bottom-up.
 * A projection's, aggregate's or window's output takes the leaves of the attributes its
 * expression reads (a subquery in it: all of the subquery's output), a generator's outputs
 * those of the generator's input, an Expand's and a set operation's outputs those at the
 * same position of each projection or child (EXCEPT: its left child only, whose rows it
 * keeps), a CTE reference those of its definition by position. Conditions, join keys,
 * grouping and sort keys carry nothing. Any other node is Untraced.
 */
class Lineage {

    static class Untraced extends RuntimeException {
        Untraced(String what) {
            super(what);
        }
    }

    private static final char US = (char) 31;
    private static final java.util.Set PASS = new java.util.HashSet(java.util.Arrays.asList(
        new String[] {"SubqueryAlias", "View", "Filter", "Sort", "GlobalLimit", "LocalLimit",
            "Offset", "Tail", "Sample", "Distinct", "Deduplicate", "DeduplicateWithinWatermark",
            "Repartition", "RepartitionByExpression", "RebalancePartitions", "ResolvedHint",
            "CollectMetrics", "WindowGroupLimit", "Join", "Subquery"}));
    private static final java.util.Set EMPTY = new java.util.HashSet(java.util.Arrays.asList(
        new String[] {"OneRowRelation", "LocalRelation", "Range", "EmptyRelation"}));
    private static final int MAX_DEPTH = 20000;

    private final java.util.Map env = new java.util.HashMap();  // ExprId -> Set of leaves
    private final java.util.Map renamed = new java.util.HashMap();  // ExprId -> List of names
    private final java.util.IdentityHashMap done = new java.util.IdentityHashMap();
    private final java.util.Map ctes = new java.util.HashMap();  // cte id -> List of Sets

    private static String kind(Object node) {
        String kind = node.getClass().getSimpleName();
        return kind.endsWith("$") ? kind.substring(0, kind.length() - 1) : kind;
    }

    java.util.Set of(org.apache.spark.sql.catalyst.expressions.Attribute a) {
        java.util.Set s = (java.util.Set) env.get(a.exprId());
        if (s == null) {
            throw new Untraced("attribute " + a.name());
        }
        return s;
    }

    private void define(Object attribute, java.util.Set leaves) {
        env.put(((org.apache.spark.sql.catalyst.expressions.NamedExpression) attribute)
            .toAttribute().exprId(), leaves);
    }

    private java.util.List outputs(org.apache.spark.sql.catalyst.plans.logical.LogicalPlan p) {
        java.util.List out = new java.util.ArrayList();
        scala.collection.Iterator it = p.output().iterator();
        while (it.hasNext()) {
            out.add(of((org.apache.spark.sql.catalyst.expressions.Attribute) it.next()));
        }
        return out;
    }

    void visit(org.apache.spark.sql.catalyst.plans.logical.LogicalPlan node, int depth) {
        if (depth > MAX_DEPTH) {
            throw new Untraced("a plan too deep");
        }
        if (done.containsKey(node)) {
            return;
        }
        done.put(node, Boolean.TRUE);
        String kind = kind(node);
        if ("WithCTE".equals(kind)) {
            org.apache.spark.sql.catalyst.plans.logical.WithCTE w =
                (org.apache.spark.sql.catalyst.plans.logical.WithCTE) node;
            scala.collection.Iterator defs = w.cteDefs().iterator();
            while (defs.hasNext()) {
                org.apache.spark.sql.catalyst.plans.logical.CTERelationDef d =
                    (org.apache.spark.sql.catalyst.plans.logical.CTERelationDef) defs.next();
                visit(d.child(), depth + 1);
                ctes.put(Long.valueOf(d.id()), outputs(d.child()));
            }
            visit(w.plan(), depth + 1);
            return;
        }
        if ("CTERelationRef".equals(kind)) {
            org.apache.spark.sql.catalyst.plans.logical.CTERelationRef r =
                (org.apache.spark.sql.catalyst.plans.logical.CTERelationRef) node;
            java.util.List known = (java.util.List) ctes.get(Long.valueOf(r.cteId()));
            if (known == null || known.size() != r.output().size()) {
                throw new Untraced(kind);
            }
            scala.collection.Iterator it = r.output().iterator();
            for (int i = 0; it.hasNext(); i++) {
                define(it.next(), (java.util.Set) known.get(i));
            }
            return;
        }
        scala.collection.Iterator children = node.children().iterator();
        while (children.hasNext()) {
            visit((org.apache.spark.sql.catalyst.plans.logical.LogicalPlan) children.next(),
                depth + 1);
        }
        if ("LogicalRelation".equals(kind) || "DataSourceV2Relation".equals(kind)) {
            java.util.List paths = PlanWalker.rootPaths(node, kind);
            if (paths == null) {
                throw new Untraced("a relation with no known location");
            }
            StringBuilder b = new StringBuilder();
            for (int i = 0; i < paths.size(); i++) {
                if (i > 0) {
                    b.append(US);
                }
                b.append((String) paths.get(i));
            }
            String at = PlanWalker.esc(b.toString());
            scala.collection.Iterator it = node.output().iterator();
            while (it.hasNext()) {
                Object a = it.next();
                java.util.Set leaf = new java.util.TreeSet();
                leaf.add(at + US + PlanWalker.esc(
                    ((org.apache.spark.sql.catalyst.expressions.Attribute) a).name()));
                define(a, leaf);
            }
        } else if (EMPTY.contains(kind)) {
            scala.collection.Iterator it = node.output().iterator();
            while (it.hasNext()) {
                define(it.next(), new java.util.TreeSet());
            }
        } else if ("Project".equals(kind)) {
            named(((org.apache.spark.sql.catalyst.plans.logical.Project) node).projectList(),
                depth);
        } else if ("Aggregate".equals(kind)) {
            named(((org.apache.spark.sql.catalyst.plans.logical.Aggregate) node)
                .aggregateExpressions(), depth);
        } else if ("Window".equals(kind)) {
            named(((org.apache.spark.sql.catalyst.plans.logical.Window) node)
                .windowExpressions(), depth);
        } else if ("Generate".equals(kind)) {
            org.apache.spark.sql.catalyst.plans.logical.Generate g =
                (org.apache.spark.sql.catalyst.plans.logical.Generate) node;
            java.util.Set from = leaves(g.generator(), depth);
            scala.collection.Iterator it = g.generatorOutput().iterator();
            while (it.hasNext()) {
                define(it.next(), from);
            }
        } else if ("Expand".equals(kind)) {
            org.apache.spark.sql.catalyst.plans.logical.Expand e =
                (org.apache.spark.sql.catalyst.plans.logical.Expand) node;
            java.util.List at = new java.util.ArrayList();
            for (int i = 0; i < e.output().size(); i++) {
                at.add(new java.util.TreeSet());
            }
            scala.collection.Iterator rows = e.projections().iterator();
            while (rows.hasNext()) {
                scala.collection.Iterator it = ((scala.collection.Iterable) rows.next()).iterator();
                for (int i = 0; it.hasNext(); i++) {
                    Object x = it.next();
                    if (i >= at.size()) {
                        throw new Untraced(kind);
                    }
                    ((java.util.Set) at.get(i)).addAll(leaves(x, depth));
                }
            }
            scala.collection.Iterator it = e.output().iterator();
            for (int i = 0; it.hasNext(); i++) {
                define(it.next(), (java.util.Set) at.get(i));
            }
        } else if ("Union".equals(kind) || "Intersect".equals(kind) || "Except".equals(kind)) {
            scala.collection.Seq kids = node.children();
            int n = "Except".equals(kind) ? 1 : kids.size();
            java.util.List at = new java.util.ArrayList();
            for (int i = 0; i < node.output().size(); i++) {
                at.add(new java.util.TreeSet());
            }
            for (int k = 0; k < n; k++) {
                java.util.List theirs = outputs(
                    (org.apache.spark.sql.catalyst.plans.logical.LogicalPlan) kids.apply(k));
                if (theirs.size() != at.size()) {
                    throw new Untraced(kind);
                }
                for (int i = 0; i < at.size(); i++) {
                    ((java.util.Set) at.get(i)).addAll((java.util.Set) theirs.get(i));
                }
            }
            scala.collection.Iterator it = node.output().iterator();
            for (int i = 0; it.hasNext(); i++) {
                define(it.next(), (java.util.Set) at.get(i));
            }
        } else if (!PASS.contains(kind)) {
            throw new Untraced(kind);
        }
    }

    private void named(scala.collection.Seq list, int depth) {
        scala.collection.Iterator it = list.iterator();
        while (it.hasNext()) {
            Object e = it.next();
            define(e, leaves(e, depth));
            org.apache.spark.sql.catalyst.expressions.Attribute a =
                ((org.apache.spark.sql.catalyst.expressions.NamedExpression) e).toAttribute();
            Object inner = e;
            while (inner instanceof org.apache.spark.sql.catalyst.expressions.Alias
                    || inner instanceof org.apache.spark.sql.catalyst.expressions.Cast) {
                inner = ((org.apache.spark.sql.catalyst.expressions.Expression) inner)
                    .children().apply(0);
            }
            if (inner != e && inner instanceof org.apache.spark.sql.catalyst.expressions.Attribute) {
                java.util.List chain = new java.util.ArrayList();
                chain.add(a.name());
                chain.addAll(names((org.apache.spark.sql.catalyst.expressions.Attribute) inner));
                renamed.put(a.exprId(), chain);
            }
        }
    }

    /** The attribute's name, then those it had below as a renamed or cast column. */
    java.util.List names(org.apache.spark.sql.catalyst.expressions.Attribute a) {
        java.util.List chain = (java.util.List) renamed.get(a.exprId());
        if (chain != null) {
            java.util.List out = new java.util.ArrayList(chain);
            out.set(0, a.name());
            return out;
        }
        java.util.List out = new java.util.ArrayList();
        out.add(a.name());
        return out;
    }

    /** The leaves of every attribute an expression reads, a subquery's whole output. */
    private java.util.Set leaves(Object expression, int depth) {
        java.util.Set out = new java.util.TreeSet();
        java.util.List stack = new java.util.ArrayList();
        stack.add(expression);
        while (!stack.isEmpty()) {
            Object e = stack.remove(stack.size() - 1);
            if (e instanceof org.apache.spark.sql.catalyst.expressions.Attribute) {
                out.addAll(of((org.apache.spark.sql.catalyst.expressions.Attribute) e));
                continue;
            }
            if (e instanceof org.apache.spark.sql.catalyst.expressions.OuterReference) {
                stack.add(((org.apache.spark.sql.catalyst.expressions.OuterReference) e).e());
                continue;
            }
            if (e instanceof org.apache.spark.sql.catalyst.expressions.SubqueryExpression) {
                org.apache.spark.sql.catalyst.plans.logical.LogicalPlan p =
                    (org.apache.spark.sql.catalyst.plans.logical.LogicalPlan)
                        ((org.apache.spark.sql.catalyst.expressions.SubqueryExpression) e).plan();
                visit(p, depth + 1);
                java.util.List theirs = outputs(p);
                for (int i = 0; i < theirs.size(); i++) {
                    out.addAll((java.util.Set) theirs.get(i));
                }
            }
            scala.collection.Iterator kids =
                ((org.apache.spark.sql.catalyst.expressions.Expression) e).children().iterator();
            while (kids.hasNext()) {
                stack.add(kids.next());
            }
        }
        return out;
    }
}
