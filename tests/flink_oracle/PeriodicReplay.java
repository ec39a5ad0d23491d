package dfwm.oracle;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.apache.flink.api.common.eventtime.Watermark;
import org.apache.flink.api.common.eventtime.WatermarkGenerator;
import org.apache.flink.api.common.eventtime.WatermarkGeneratorSupplier;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.event.WatermarkEvent;
import org.apache.flink.streaming.api.operators.Output;
import org.apache.flink.streaming.runtime.operators.TimestampsAndWatermarksOperator;
import org.apache.flink.streaming.runtime.streamrecord.LatencyMarker;
import org.apache.flink.streaming.runtime.streamrecord.RecordAttributes;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;
import org.apache.flink.util.OutputTag;
import org.apache.flink.util.clock.RelativeClock;

/**
 * Replays a trace through Flink's own periodic watermark code, deterministically: the generator
 * of {@code WatermarkStrategy.forBoundedOutOfOrderness(bound)} (optionally {@code
 * .withIdleness(timeout)}) and the {@code TimestampsAndWatermarksOperator.WatermarkEmitter} that
 * suppresses non-increasing watermarks and toggles IDLE/ACTIVE, on a manual clock.
 *
 * <p>The processing-time schedule is theory.flink's model: timers at {@code start + k *
 * interval}; an element arriving at a timer's time is read before that timer; at the end of input
 * one more periodic emit and the {@code Long.MAX_VALUE} watermark, as the operator's finish() and
 * processWatermark() do. Times and values in ms. Output lines: {@code W,time,watermark} and
 * {@code S,time,IDLE|ACTIVE}.
 */
public final class PeriodicReplay {

    private PeriodicReplay() {}

    private static final class ManualClock implements RelativeClock {
        long nanos;

        @Override
        public long relativeTimeMillis() {
            return nanos / 1_000_000L;
        }

        @Override
        public long relativeTimeNanos() {
            return nanos;
        }
    }

    private static final class Recorder implements Output<Object> {
        final List<String> lines = new ArrayList<>();
        long now;

        @Override
        public void emitWatermark(org.apache.flink.streaming.api.watermark.Watermark mark) {
            lines.add("W," + now + "," + mark.getTimestamp());
        }

        @Override
        public void emitWatermarkStatus(WatermarkStatus status) {
            lines.add("S," + now + "," + (status.isIdle() ? "IDLE" : "ACTIVE"));
        }

        @Override
        public <X> void collect(OutputTag<X> tag, StreamRecord<X> record) {}

        @Override
        public void emitLatencyMarker(LatencyMarker marker) {}

        @Override
        public void emitRecordAttributes(RecordAttributes attributes) {}

        @Override
        public void emitWatermark(WatermarkEvent event) {}

        @Override
        public void collect(Object record) {}

        @Override
        public void close() {}
    }

    private static long[] parse(String csv) {
        if (csv.isEmpty()) {
            return new long[0];
        }
        String[] parts = csv.split(",");
        long[] out = new long[parts.length];
        for (int i = 0; i < parts.length; i++) {
            out[i] = Long.parseLong(parts[i]);
        }
        return out;
    }

    /** Comma-separated event times and arrival times (ms); idleMillis 0 means no idleness. */
    public static String[] replay(String eventCsv, String arrivalCsv, long boundMillis,
            long intervalMillis, long startMillis, long untilMillis, long idleMillis,
            boolean finish) {
        long[] ts = parse(eventCsv);
        long[] arrival = parse(arrivalCsv);
        WatermarkStrategy<Object> strategy =
                WatermarkStrategy.forBoundedOutOfOrderness(Duration.ofMillis(boundMillis));
        if (idleMillis > 0) {
            strategy = strategy.withIdleness(Duration.ofMillis(idleMillis));
        }
        ManualClock clock = new ManualClock();
        WatermarkGenerator<Object> gen = strategy.createWatermarkGenerator(
                new WatermarkGeneratorSupplier.Context() {
                    @Override
                    public MetricGroup getMetricGroup() {
                        return new UnregisteredMetricsGroup();
                    }

                    @Override
                    public RelativeClock getInputActivityClock() {
                        return clock;
                    }
                });
        Recorder rec = new Recorder();
        TimestampsAndWatermarksOperator.WatermarkEmitter out =
                new TimestampsAndWatermarksOperator.WatermarkEmitter(rec);
        long next = startMillis + intervalMillis;
        // the idleness timer treats 0 ns as "no countdown": keep the clock away from 0
        long origin = 1_000_000_000L - startMillis * 1_000_000L;
        for (int i = 0; i < ts.length; i++) {
            while (next < arrival[i]) {
                rec.now = next;
                clock.nanos = origin + next * 1_000_000L;
                gen.onPeriodicEmit(out);
                next += intervalMillis;
            }
            rec.now = arrival[i];
            clock.nanos = origin + arrival[i] * 1_000_000L;
            gen.onEvent(null, ts[i], out);
        }
        while (next <= untilMillis) {
            rec.now = next;
            clock.nanos = origin + next * 1_000_000L;
            gen.onPeriodicEmit(out);
            next += intervalMillis;
        }
        if (finish) {
            rec.now = untilMillis;
            clock.nanos = origin + untilMillis * 1_000_000L;
            gen.onPeriodicEmit(out);
            out.emitWatermark(Watermark.MAX_WATERMARK);
        }
        return rec.lines.toArray(new String[0]);
    }
}
