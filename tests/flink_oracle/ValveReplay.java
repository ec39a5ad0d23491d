package dfwm.oracle;

import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.apache.flink.runtime.event.WatermarkEvent;
import org.apache.flink.streaming.api.watermark.Watermark;
import org.apache.flink.streaming.runtime.io.PushingAsyncDataInput;
import org.apache.flink.streaming.runtime.streamrecord.LatencyMarker;
import org.apache.flink.streaming.runtime.streamrecord.RecordAttributes;
import org.apache.flink.streaming.runtime.streamrecord.StreamRecord;
import org.apache.flink.streaming.runtime.watermarkstatus.StatusWatermarkValve;
import org.apache.flink.streaming.runtime.watermarkstatus.WatermarkStatus;

/**
 * Feeds input sequences to Flink's own {@code StatusWatermarkValve} (the class every Flink task
 * uses, from the jars PyFlink ships) and prints what it emits and its state after every input.
 *
 * <p>Usage: {@code java -cp "pyflink/lib/*:flink-oracle.jar" dfwm.oracle.ValveReplay IN OUT}.
 * IN holds one sequence per line: the channel count, then space-separated inputs, each {@code
 * W<channel>:<watermark>} (a long), {@code I<channel>} (IDLE) or {@code A<channel>} (ACTIVE).
 * OUT gets one line per sequence: per input, separated by {@code ;}, the emitted items
 * ({@code ,}-separated longs, {@code IDLE}, {@code ACTIVE}; none is empty), {@code |}, every
 * channel's {@code watermark:A|I:1|0} (status, aligned) space-separated, {@code |}, the valve's
 * last output watermark and status. Channel and valve state are private in Flink, read here by
 * reflection, so the test can compare alignment flags too.
 */
public final class ValveReplay {

    private static final String VALVE = StatusWatermarkValve.class.getName();

    private ValveReplay() {}

    /** Records what the valve emits; the valve emits nothing else. */
    private static final class Recorder implements PushingAsyncDataInput.DataOutput<Object> {
        final List<String> items = new ArrayList<>();

        @Override
        public void emitWatermark(Watermark mark) {
            items.add(Long.toString(mark.getTimestamp()));
        }

        @Override
        public void emitWatermarkStatus(WatermarkStatus status) {
            items.add(status.isIdle() ? "IDLE" : "ACTIVE");
        }

        @Override
        public void emitRecord(StreamRecord<Object> record) {
            throw new UnsupportedOperationException("the valve emits no records");
        }

        @Override
        public void emitLatencyMarker(LatencyMarker marker) {
            throw new UnsupportedOperationException("the valve emits no latency markers");
        }

        @Override
        public void emitRecordAttributes(RecordAttributes attributes) {
            throw new UnsupportedOperationException("the valve emits no record attributes");
        }

        @Override
        public void emitWatermark(WatermarkEvent event) {
            throw new UnsupportedOperationException("the valve emits no generalized watermarks");
        }
    }

    /** Reads the valve's private state: per channel watermark, status, alignment; last output. */
    private static final class Probe {
        final Method channel;
        final Field watermark;
        final Field status;
        final Field aligned;
        final Field lastWatermark;
        final Field lastStatus;

        Probe() throws ReflectiveOperationException {
            channel = StatusWatermarkValve.class.getDeclaredMethod("getSubpartitionStatus", int.class);
            Class<?> sub = Class.forName(VALVE + "$SubpartitionStatus");
            watermark = sub.getDeclaredField("watermark");
            status = sub.getDeclaredField("watermarkStatus");
            aligned = sub.getDeclaredField("isWatermarkAligned");
            lastWatermark = StatusWatermarkValve.class.getDeclaredField("lastOutputWatermark");
            lastStatus = StatusWatermarkValve.class.getDeclaredField("lastOutputWatermarkStatus");
            for (java.lang.reflect.AccessibleObject o :
                    new java.lang.reflect.AccessibleObject[] {
                        channel, watermark, status, aligned, lastWatermark, lastStatus
                    }) {
                o.setAccessible(true);
            }
        }

        String state(StatusWatermarkValve valve, int channels) throws ReflectiveOperationException {
            StringBuilder out = new StringBuilder();
            for (int c = 0; c < channels; c++) {
                Object s = channel.invoke(valve, c);
                out.append(c == 0 ? "" : " ")
                        .append(watermark.getLong(s))
                        .append(((WatermarkStatus) status.get(s)).isIdle() ? ":I:" : ":A:")
                        .append(aligned.getBoolean(s) ? "1" : "0");
            }
            WatermarkStatus last = (WatermarkStatus) lastStatus.get(valve);
            return out.append('|')
                    .append(lastWatermark.getLong(valve))
                    .append(',')
                    .append(last.isIdle() ? "IDLE" : "ACTIVE")
                    .toString();
        }
    }

    /** One sequence line in, one result line out (see the class comment). */
    static String replay(String line, Probe probe) throws Exception {
        String[] parts = line.trim().split(" ");
        int channels = Integer.parseInt(parts[0]);
        StatusWatermarkValve valve = new StatusWatermarkValve(channels);
        StringBuilder out = new StringBuilder();
        for (int i = 1; i < parts.length; i++) {
            String op = parts[i];
            Recorder rec = new Recorder();
            char kind = op.charAt(0);
            if (kind == 'W') {
                int colon = op.indexOf(':');
                int c = Integer.parseInt(op.substring(1, colon));
                long w = Long.parseLong(op.substring(colon + 1));
                valve.inputWatermark(new Watermark(w), c, rec);
            } else {
                int c = Integer.parseInt(op.substring(1));
                WatermarkStatus s = kind == 'I' ? WatermarkStatus.IDLE : WatermarkStatus.ACTIVE;
                valve.inputWatermarkStatus(s, c, rec);
            }
            out.append(i == 1 ? "" : ";")
                    .append(String.join(",", rec.items))
                    .append('|')
                    .append(probe.state(valve, channels));
        }
        return out.toString();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            throw new IllegalArgumentException("usage: ValveReplay IN OUT");
        }
        Probe probe = new Probe();
        List<String> results = new ArrayList<>();
        for (String line : Files.readAllLines(Path.of(args[0]), StandardCharsets.UTF_8)) {
            if (!line.isBlank()) {
                results.add(replay(line, probe));
            }
        }
        write(Path.of(args[1]), results);
    }

    private static void write(Path path, List<String> lines) throws IOException {
        Files.write(path, lines, StandardCharsets.UTF_8);
    }
}
