// QuartzOracle answers the differential test in quartz_diff_test.go with
// Quartz's own CronExpression. It reads requests from stdin, one a line,
// fields separated by tabs, and writes one answer a line:
//
//   N <id> <zone> <start epoch seconds> <count> <hex UTF-8 expr>
//     -> <id> ERR <message>            Quartz refuses the expression
//     -> <id> OK <t1> <t2> ...         next fire times in epoch seconds,
//                                      each after the previous one; "-" for
//                                      none; "THROW:<class>" when Quartz throws
//   C <id> <hex UTF-8 a> <hex UTF-8 b>
//     -> <id> CMP <sign of a.compareTo(b)>
import java.nio.charset.StandardCharsets;
import java.io.*;
import java.util.*;
import org.quartz.CronExpression;

public class QuartzOracle {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintWriter out = new PrintWriter(new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8)));
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\t", -1);
            if (f[0].equals("C")) {
                int c = decode(f[2]).compareTo(decode(f[3]));
                out.println(f[1] + "\tCMP\t" + Integer.signum(c));
                continue;
            }
            String id = f[1];
            CronExpression ce;
            try {
                ce = new CronExpression(decode(f[5]));
            } catch (Exception e) {
                out.println(id + "\tERR\t" + e.getMessage().replace('\t', ' ').replace('\n', ' '));
                continue;
            }
            ce.setTimeZone(TimeZone.getTimeZone(f[2]));
            StringBuilder sb = new StringBuilder(id).append("\tOK");
            Date d = new Date(Long.parseLong(f[3]) * 1000L);
            int n = Integer.parseInt(f[4]);
            for (int i = 0; i < n; i++) {
                try {
                    d = ce.getTimeAfter(d);
                } catch (RuntimeException e) {
                    sb.append("\tTHROW:").append(e.getClass().getSimpleName());
                    break;
                }
                if (d == null) {
                    sb.append("\t-");
                    break;
                }
                sb.append('\t').append(d.getTime() / 1000L);
            }
            out.println(sb);
        }
        out.flush();
    }

    static String decode(String hex) {
        byte[] b = new byte[hex.length() / 2];
        for (int i = 0; i < b.length; i++) {
            b[i] = (byte) Integer.parseInt(hex.substring(2 * i, 2 * i + 2), 16);
        }
        return new String(b, StandardCharsets.UTF_8);
    }
}
