package dev.leasehold.examples;

import dev.leasehold.client.Client;
import dev.leasehold.client.Elector;
import dev.leasehold.client.FencedException;
import dev.leasehold.client.InvalidArgumentException;
import dev.leasehold.client.LeaseLostException;
import dev.leasehold.client.LeaseholdException;
import dev.leasehold.client.NoSuccessorException;
import dev.leasehold.client.UnknownTokenException;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The conformance worker for Java (clients/conformance/README.md has the
 * protocol): one Elector for one job, driven over stdin, reporting on
 * stdout. Also a complete example of a worker: lead, write fenced by the
 * token, release on SIGTERM (in a shutdown hook).
 *
 * <pre>java -cp ... dev.leasehold.examples.ConformanceWorker --server 127.0.0.1:50051 --job j --name w1 --ttl-ms 1000 [--bind] [--preferred] [--yield]</pre>
 *
 * <p>{@code --bind} builds the worker's elector with
 * {@code bindToStream(true)}, {@code --preferred} with
 * {@code preferred(true)}, {@code --yield} with
 * {@code yieldToPreferred(true)} (the twins have none of them).
 */
public final class ConformanceWorker {
  private ConformanceWorker() {}

  static synchronized void say(String line) {
    System.out.println(line);
    System.out.flush();
  }

  public static void main(String[] argv) throws Exception {
    // The tests' SLF4J binding (slf4j-simple) logs the client at debug; the
    // scenario reads stdout only, and wants stderr quiet but for errors.
    System.setProperty("org.slf4j.simpleLogger.log.dev.leasehold.client", "error");
    Map<String, String> args = new HashMap<>();
    boolean bind = false;
    boolean preferred = false;
    boolean yield = false;
    for (int i = 0; i < argv.length; i++) {
      String name = argv[i].replaceFirst("^--", "");
      // Flags, without a value.
      if (name.equals("bind")) {
        bind = true;
      } else if (name.equals("preferred")) {
        preferred = true;
      } else if (name.equals("yield")) {
        yield = true;
      } else if (i + 1 < argv.length) {
        args.put(name, argv[++i]);
      }
    }
    String job = args.get("job");
    Client client = Client.connect(args.getOrDefault("server", Client.DEFAULT_TARGET));
    AtomicLong lastToken = new AtomicLong(); // the token we last led with, kept after losing
    Elector elector = Elector.builder(client, job, args.getOrDefault("name", "worker"))
        .ttl(Duration.ofMillis(Long.parseLong(args.getOrDefault("ttl-ms", "1000"))))
        .onElected(t -> {
          lastToken.set(t);
          say("elected token=" + Long.toUnsignedString(t));
        })
        .onLost(t -> say("lost token=" + Long.toUnsignedString(t)))
        .bindToStream(bind)
        .preferred(preferred)
        .yieldToPreferred(yield)
        .build();
    say("holder " + elector.holder());

    // Two more electors, one name, one process (the "twin" command).
    List<Elector> twins = new ArrayList<>();
    List<AtomicLong> twinTokens = new ArrayList<>();

    // SIGTERM runs the shutdown hooks: resign (release), then exit 0.
    Object once = new Object();
    boolean[] done = {false};
    Runnable shutdown = () -> {
      synchronized (once) {
        if (done[0]) {
          return;
        }
        done[0] = true;
      }
      synchronized (twins) {
        twins.forEach(Elector::close);
      }
      elector.close(); // releases the lease if held
      say("bye");
      client.close();
    };
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      shutdown.run();
      Runtime.getRuntime().halt(0); // a graceful shutdown is a success
    }, "shutdown"));
    elector.start();

    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      String[] parts = line.trim().split(" ", 2);
      String cmd = parts[0];
      String arg = parts.length > 1 ? parts[1] : "";
      if (cmd.equals("quit")) {
        break;
      } else if (cmd.equals("write")) {
        say(write(client, job, lastToken.get(), arg));
      } else if (cmd.equals("bad")) {
        say("bad " + arg + " " + bad(client, job, elector.holder(), lastToken.get(), arg));
      } else if (cmd.equals("transfer")) {
        say(transfer(elector, null));
      } else if (cmd.equals("transfer-to")) {
        say(transfer(elector, arg));
      } else if (cmd.equals("twin")) {
        synchronized (twins) {
          if (twins.isEmpty()) {
            startTwins(client, arg, args.getOrDefault("name", "worker"),
                Duration.ofMillis(Long.parseLong(args.getOrDefault("ttl-ms", "1000"))), twins, twinTokens);
          }
        }
      } else if (cmd.equals("twin-write")) {
        String[] iv = arg.split(" ", 2);
        int i = Integer.parseInt(iv[0]);
        say("twin-" + write(client, twins.get(i).job(), twinTokens.get(i).get(), iv.length > 1 ? iv[1] : ""));
      } else if (cmd.equals("twin-stop")) {
        twins.get(Integer.parseInt(arg)).close();
        say("twin-stop done");
      } else if (!cmd.isEmpty()) {
        say("error unknown command " + cmd);
      }
    }
    shutdown.run();
    System.exit(0);
  }

  /** Two electors with one name for {@code job}: each is its own holder, so at most one leads. */
  static void startTwins(Client client, String job, String name, Duration ttl, List<Elector> twins,
      List<AtomicLong> tokens) {
    for (int i = 0; i < 2; i++) {
      int n = i;
      AtomicLong last = new AtomicLong(); // the token it last led with
      tokens.add(last);
      twins.add(Elector.builder(client, job, name).ttl(ttl)
          .onElected(t -> {
            last.set(t);
            say("twin elected " + n + " token=" + Long.toUnsignedString(t));
          })
          .onLost(t -> say("twin lost " + n + " token=" + Long.toUnsignedString(t)))
          .build());
      say("twin holder " + i + " " + twins.get(i).holder());
    }
    twins.forEach(Elector::start);
  }

  /**
   * Hands the elector's lead to the first waiter ({@code to} null) or to
   * the waiting holder {@code to}; the elector reports the loss itself
   * ({@code lost token=N}).
   */
  static String transfer(Elector elector, String to) {
    try {
      return "transfer ok token=" + Long.toUnsignedString(elector.transfer(to).token());
    } catch (IllegalStateException e) {
      return "transfer not-leader";
    } catch (NoSuccessorException e) {
      return "transfer no-successor";
    } catch (LeaseLostException e) {
      return "transfer lost";
    } catch (LeaseholdException e) {
      return "transfer error " + e;
    }
  }

  static String write(Client client, String job, long token, String value) {
    // No "am I still the leader?" check first: it could be stale by the
    // time the write lands. The token goes with the write; the server decides.
    if (token == 0) {
      return "write error never-led";
    }
    try {
      return "write ok version=" + client.checkedWrite(job, token, "status", value);
    } catch (FencedException e) {
      return "write fenced current=" + e.currentToken().orElse(0);
    } catch (LeaseholdException e) {
      return "write error " + e;
    }
  }

  static String bad(Client client, String job, String holder, long token, String which) {
    try {
      switch (which) {
        case "job" -> client.acquire("", holder, Duration.ofSeconds(1));
        case "ttl" -> client.acquire(job, holder, Duration.ofMillis(1));
        case "key" -> client.checkedWrite(job, token == 0 ? 1 : token, new byte[0], new byte[] {'x'});
        case "token" -> client.checkedWrite(job, 1L << 62, "status", "x");
        default -> {
          return "error unknown case";
        }
      }
      return "accepted";
    } catch (UnknownTokenException e) {
      return "unknown-token current=" + e.currentToken().orElse(0);
    } catch (InvalidArgumentException e) {
      return "invalid field=" + e.field();
    } catch (LeaseholdException e) {
      return "other " + e;
    }
  }
}
