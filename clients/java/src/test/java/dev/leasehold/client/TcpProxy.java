package dev.leasehold.client;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.ArrayList;
import java.util.List;

/**
 * A TCP proxy to a server, whose connections a test can cut, as a proxy or
 * load balancer may, or as a dead process's kernel closes them: the server
 * sees its end closed (a FIN, or a RST) without an HTTP/2 GOAWAY first. It
 * can also hold the server's replies back for a while, so that a test can
 * line up what a client learns.
 */
final class TcpProxy implements AutoCloseable {
  private final ServerSocket listener;
  private final String upstreamHost;
  private final int upstreamPort;
  private final List<Socket> sockets = new ArrayList<>();
  private final Object gate = new Object();
  private boolean holding;

  TcpProxy(String upstream) throws IOException {
    int i = upstream.lastIndexOf(':');
    upstreamHost = upstream.substring(0, i);
    upstreamPort = Integer.parseInt(upstream.substring(i + 1));
    listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    Thread accept = new Thread(this::accept, "proxy-accept");
    accept.setDaemon(true);
    accept.start();
  }

  /** The proxy's address, for {@link Client#connect(String)}. */
  String target() {
    return "127.0.0.1:" + listener.getLocalPort();
  }

  private void accept() {
    while (true) {
      Socket down;
      Socket up;
      try {
        down = listener.accept();
      } catch (IOException e) {
        return; // closed
      }
      try {
        up = new Socket(upstreamHost, upstreamPort);
      } catch (IOException e) {
        closeQuietly(down);
        continue;
      }
      synchronized (sockets) {
        sockets.add(down);
        sockets.add(up);
      }
      pump(down, up, false);
      pump(up, down, true);
    }
  }

  private void pump(Socket from, Socket to, boolean replies) {
    Thread t = new Thread(() -> {
      byte[] buf = new byte[16384];
      try {
        int n;
        while ((n = from.getInputStream().read(buf)) >= 0) {
          if (replies) {
            awaitOpen();
          }
          to.getOutputStream().write(buf, 0, n);
          to.getOutputStream().flush();
        }
      } catch (IOException e) {
        // cut
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      } finally {
        closeQuietly(from);
        closeQuietly(to);
      }
    }, replies ? "proxy-replies" : "proxy-requests");
    t.setDaemon(true);
    t.start();
  }

  private void awaitOpen() throws InterruptedException {
    synchronized (gate) {
      while (holding) {
        gate.wait();
      }
    }
  }

  /** Holds the server's replies back (true) until told to pass them on (false); requests go through. */
  void holdReplies(boolean hold) {
    synchronized (gate) {
      holding = hold;
      gate.notifyAll();
    }
  }

  private static void closeQuietly(Socket s) {
    try {
      s.close();
    } catch (IOException e) {
      // closed
    }
  }

  /** Closes every connection through the proxy, both ends; new ones are accepted as before. */
  void cut() {
    synchronized (sockets) {
      sockets.forEach(TcpProxy::closeQuietly);
      sockets.clear();
    }
  }

  @Override
  public void close() throws IOException {
    listener.close();
    holdReplies(false);
    cut();
  }
}
