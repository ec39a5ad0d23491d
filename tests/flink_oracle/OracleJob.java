package dfwm.oracle;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkOutput;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.datastream.WindowedStream;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.EventTimeSessionWindows;
import org.apache.flink.streaming.api.windowing.assigners.SlidingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.assigners.WindowAssigner;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;
import org.apache.flink.util.OutputTag;

/**
 * The Java half of the real-Flink oracle for theory.flink (see tests/flink_oracle/job.py).
 *
 * <p>Input rows are (key STRING, ts LONG ms, seq LONG). The watermark generator is bounded
 * out-of-orderness made punctuated: after every event it emits {@code max - bound - 1}, the value
 * Flink's BoundedOutOfOrdernessWatermarks would emit at its next periodic emit. That makes the
 * job deterministic: the watermark that each element meets at the window operator depends only on
 * the elements before it, never on processing-time timers.
 *
 * <p>The windowing runs in Flink's own Java WindowOperator (EventTimeTrigger, allowed lateness,
 * late side output). Output lines are strings:
 * {@code F,key,start,end,count,currentWatermark,seq;seq;...} for each firing and
 * {@code L,key,ts,seq} for each element sent to the late side output.
 */
public final class OracleJob {

    private OracleJob() {}

    /** Bounded out-of-orderness with a watermark emitted on every event (ms, Flink's "<= W"). */
    public static final class PerEventBoundedOutOfOrderness implements WatermarkGenerator<Row> {
        private final long bound;
        private long maxTimestamp;

        public PerEventBoundedOutOfOrderness(long boundMillis) {
            if (boundMillis < 0) {
                throw new IllegalArgumentException("bound must be >= 0 ms, got " + boundMillis);
            }
            this.bound = boundMillis;
            this.maxTimestamp = Long.MIN_VALUE + boundMillis + 1;
        }

        @Override
        public void onEvent(Row event, long eventTimestamp, WatermarkOutput output) {
            maxTimestamp = Math.max(maxTimestamp, eventTimestamp);
            output.emitWatermark(new Watermark(maxTimestamp - bound - 1));
        }

        @Override
        public void onPeriodicEmit(WatermarkOutput output) {
            // punctuated: nothing on the processing-time timer
        }
    }

    /** The strategy: per-event generator, timestamp taken from field 1 of the row. */
    public static WatermarkStrategy<Row> perEventStrategy(long boundMillis) {
        return WatermarkStrategy.<Row>forGenerator(ctx -> new PerEventBoundedOutOfOrderness(boundMillis))
                .withTimestampAssigner((row, previous) -> (Long) row.getField(1));
    }

    /** Key of a row: field 0. */
    public static final class RowKey implements KeySelector<Row, String> {
        @Override
        public String getKey(Row row) {
            return (String) row.getField(0);
        }
    }

    /** One line per firing: key, window, count, the operator's watermark, the seqs in the pane. */
    public static final class DescribePane
            extends ProcessWindowFunction<Row, String, String, TimeWindow> {
        @Override
        public void process(String key, Context ctx, Iterable<Row> elements, Collector<String> out) {
            List<Long> seqs = new ArrayList<>();
            for (Row r : elements) {
                seqs.add((Long) r.getField(2));
            }
            Collections.sort(seqs);
            StringBuilder sb = new StringBuilder();
            for (Long s : seqs) {
                if (sb.length() > 0) {
                    sb.append(';');
                }
                sb.append(s);
            }
            TimeWindow w = ctx.window();
            out.collect("F," + key + "," + w.getStart() + "," + w.getEnd() + "," + seqs.size()
                    + "," + ctx.currentWatermark() + "," + sb);
        }
    }

    /** One line per late element. */
    public static final class DescribeLate implements MapFunction<Row, String> {
        @Override
        public String map(Row r) {
            return "L," + r.getField(0) + "," + r.getField(1) + "," + r.getField(2);
        }
    }

    /**
     * Timestamps and per-event watermarks, keyBy field 0, event-time windows, allowed lateness and
     * a late side output; returns firings and late elements as one stream of strings.
     *
     * @param kind "tumbling", "sliding" or "session"
     * @param size window size (tumbling, sliding) or gap (session), ms
     * @param slide slide of sliding windows, ms (ignored otherwise)
     * @param offset window offset (tumbling, sliding), ms
     */
    public static DataStream<String> build(
            DataStream<Row> input, long boundMillis, String kind, long size, long slide,
            long offset, long allowedLatenessMillis) {
        WindowAssigner<Object, TimeWindow> assigner;
        switch (kind) {
            case "tumbling":
                assigner = TumblingEventTimeWindows.of(Duration.ofMillis(size), Duration.ofMillis(offset));
                break;
            case "sliding":
                assigner = SlidingEventTimeWindows.of(
                        Duration.ofMillis(size), Duration.ofMillis(slide), Duration.ofMillis(offset));
                break;
            case "session":
                assigner = EventTimeSessionWindows.withGap(Duration.ofMillis(size));
                break;
            default:
                throw new IllegalArgumentException("unknown window kind " + kind);
        }
        OutputTag<Row> lateTag = new OutputTag<Row>("late", input.getType()) {};
        WindowedStream<Row, String, TimeWindow> windowed = input
                .assignTimestampsAndWatermarks(perEventStrategy(boundMillis))
                .keyBy(new RowKey(), Types.STRING)
                .window(assigner)
                .allowedLateness(Duration.ofMillis(allowedLatenessMillis))
                .sideOutputLateData(lateTag);
        SingleOutputStreamOperator<String> fired =
                windowed.process(new DescribePane(), Types.STRING);
        DataStream<String> late =
                fired.getSideOutput(lateTag).map(new DescribeLate()).returns(Types.STRING);
        return fired.union(late);
    }
}
